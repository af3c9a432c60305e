"""Build the CUDA kernel into a shared library, cached by content, or load the prebuilt one.

The library is plain ``nvcc`` output behind a C ABI (no torch headers), so one build
serves any torch version. It holds machine code for sm_90a and sm_120a and the sources
as compute_80 PTX, which the driver compiles for any other GPU from sm_80 on (A100, L40S,
B200); the plan then runs the portable path there (verify_api.cu: kdtree_code_arch()).

Which library a call uses:

* an installed wheel carries a prebuilt library in ``kdtree/prebuilt/`` with a record of
  the sources it was built from (``build.json``). While the installed sources are those
  sources, that library is used, with or without nvcc on the host;
* otherwise (a checkout, edited sources, a build with ``-D`` switches or another source
  tree) it is built with nvcc into ``$KDTREE_BUILD_DIR`` (default ``~/.cache/kdtree``)/
  <build hash>/, under a file lock so parallel test workers build it once. A library is
  never reused for other sources: the hash covers every source file, the flags and the
  nvcc version.

``python -m kdtree.build`` builds the installed sources with nvcc and says whether the
prebuilt library matches them. Every function that builds takes an optional ``root``:
another source tree of the same layout (an older checkout's ``kernels/csrc``, for
same-run A/B timing).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

TARGETS = ("90a", "120a")   # machine code (cubin) per target
PTX_TARGETS = ("80",)       # embedded as PTX, compiled by the driver for other GPUs
ENTRY = "verify_api.cu"
LIBRARY = "libkdtree_verify.so"
PREBUILT_DIR = Path(__file__).resolve().parent / "prebuilt"
PREBUILT_RECORD = "build.json"


def source_dir() -> Path:
    """The CUDA sources: kernels/csrc in a checkout, kdtree/csrc in an installed wheel."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "csrc", here.parent / "csrc"):
        if (candidate / ENTRY).is_file():
            return candidate
    raise FileNotFoundError(f"kdtree CUDA sources ({ENTRY}) not found next to {here}")


def nvcc_path() -> str:
    for candidate in (os.environ.get("KDTREE_NVCC"), shutil.which("nvcc"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if candidate and os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError("nvcc not found: set KDTREE_NVCC or CUDA_HOME, or put nvcc on PATH")


def nvcc_flags(targets=TARGETS, defines=(), ptx=PTX_TARGETS) -> list[str]:
    """nvcc's flags: machine code for each of ``targets``, PTX for each of ``ptx``."""
    flags = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo"]
    flags += [f"-D{d}" for d in defines]
    for t in targets:
        flags.append(f"-gencode=arch=compute_{t},code=sm_{t}")
    for t in ptx:
        flags.append(f"-gencode=arch=compute_{t},code=compute_{t}")
    return flags


def source_tree(path: Path | str) -> Path:
    """The CUDA source directory of another tree: ``path`` itself when it holds ENTRY, else
    its ``kernels/csrc`` (a checkout's root). Raises FileNotFoundError naming ``path``."""
    path = Path(path).resolve()
    for candidate in (path, path / "kernels" / "csrc"):
        if (candidate / ENTRY).is_file():
            return candidate
    raise FileNotFoundError(f"no kdtree CUDA sources in {path}: expected {ENTRY} there or in its kernels/csrc")


def sources(root: Path) -> list[Path]:
    """The CUDA source files under ``root`` (.cu, .cuh, .h), sorted."""
    return sorted(p for p in root.rglob("*") if p.suffix in (".cu", ".cuh", ".h"))


def source_digest(defines: tuple[str, ...] = (), root: Path | None = None, targets=TARGETS,
                  ptx=PTX_TARGETS) -> str:
    """sha256 (hex) over the sources (of ``root``, default source_dir()) and the flags: what a
    prebuilt library must have been built from to be used."""
    digest = hashlib.sha256()
    root = root or source_dir()
    for path in sources(root):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    digest.update(" ".join(nvcc_flags(targets, defines, ptx)).encode())
    return digest.hexdigest()


def nvcc_version() -> str:
    """``nvcc --version``'s output, or "no-nvcc"."""
    try:
        return subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, timeout=60).stdout
    except FileNotFoundError:
        return "no-nvcc"


def _hash_with_nvcc(digest: str, version: str) -> str:
    return hashlib.sha256((digest + version).encode()).hexdigest()[:12]


def prebuilt() -> dict | None:
    """The prebuilt library's record (``build``, ``source_digest``, ``nvcc``, ``targets``,
    ``ptx``, and ``path``), or None where none is installed or it was built from other
    sources than the installed ones."""
    record_path = PREBUILT_DIR / PREBUILT_RECORD
    if not (record_path.is_file() and (PREBUILT_DIR / LIBRARY).is_file()):
        return None
    record = json.loads(record_path.read_text())
    try:
        if record.get("source_digest") != source_digest():
            return None
    except FileNotFoundError:
        return None
    return {**record, "path": str(PREBUILT_DIR / LIBRARY)}


def _is_shipped(defines, root, targets, ptx) -> bool:
    return not defines and root is None and tuple(targets) == TARGETS and tuple(ptx) == PTX_TARGETS


@lru_cache(maxsize=None)
def build_hash(defines: tuple[str, ...] = (), root: Path | None = None, targets=TARGETS,
               ptx=PTX_TARGETS) -> str:
    """12 hex digits naming a build: the sources (of ``root``, default source_dir()), the flags
    and the nvcc version. The shipped build on a host using the prebuilt library is named
    by the record it was built with, so every host running one wheel names it alike."""
    if _is_shipped(defines, root, targets, ptx):
        record = prebuilt()
        if record is not None:
            return record["build"]
    return _hash_with_nvcc(source_digest(tuple(defines), root, targets, ptx), nvcc_version())


def compile_library(out: Path, targets=TARGETS, defines=(), root: Path | None = None, ptx=PTX_TARGETS) -> None:
    """Run nvcc on ``root``'s ENTRY (default source_dir()); raises RuntimeError with nvcc's
    output on failure."""
    cmd = [nvcc_path(), *nvcc_flags(targets, defines, ptx), "-o", str(out), str((root or source_dir()) / ENTRY)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed ({done.returncode}):\n{' '.join(cmd)}\n{done.stdout}{done.stderr}")


def built_library(defines: tuple[str, ...] = (), root: Path | None = None, targets=TARGETS,
                  ptx=PTX_TARGETS) -> Path:
    """Path of the library nvcc built from these sources and flags, building it first if this
    build hash has none in the cache."""
    cache = Path(os.environ.get("KDTREE_BUILD_DIR", Path.home() / ".cache" / "kdtree"))
    try:
        nvcc_path()
    except FileNotFoundError as exc:
        where = "the installed prebuilt library was built from other sources" if (PREBUILT_DIR / LIBRARY).is_file() \
            else "no prebuilt library is installed"
        raise FileNotFoundError(f"kdtree: cannot build the kernel library ({where}, and {exc})") from None
    target = cache / build_hash(tuple(defines), root, tuple(targets), tuple(ptx)) / LIBRARY
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            tmp = target.with_suffix(f".tmp{os.getpid()}.so")
            compile_library(tmp, targets=targets, defines=defines, root=root, ptx=ptx)
            os.replace(tmp, target)
    return target


def library_path(defines: tuple[str, ...] = (), root: Path | None = None, targets=TARGETS,
                 ptx=PTX_TARGETS) -> Path:
    """Path of the library to load: the prebuilt one for the shipped build of unchanged
    sources, else :func:`built_library`. ``defines`` builds a variant (the gate's negative
    controls use fault macros); ``root`` another source tree (source_tree()); ``targets`` and
    ``ptx`` other machine-code and PTX targets."""
    if _is_shipped(defines, root, targets, ptx):
        record = prebuilt()
        if record is not None:
            return Path(record["path"])
    return built_library(tuple(defines), root, tuple(targets), tuple(ptx))


def write_prebuilt(folder: Path) -> dict:
    """Build the shipped library into ``folder`` with its record (the wheel's build step)."""
    folder.mkdir(parents=True, exist_ok=True)
    compile_library(folder / LIBRARY)
    version = nvcc_version()
    digest = source_digest()
    record = {"build": _hash_with_nvcc(digest, version), "source_digest": digest,
              "nvcc": version.strip().splitlines()[-1] if version.strip() else version,
              "targets": [f"sm_{t}" for t in TARGETS], "ptx": [f"compute_{t}" for t in PTX_TARGETS]}
    (folder / PREBUILT_RECORD).write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kdtree.build",
                                     description="Build the kernel library from the installed sources with nvcc.")
    parser.parse_args(argv)
    record = prebuilt()
    print(f"sources: {source_dir()}")
    print("prebuilt library: " + (f"{record['path']} (build {record['build']}, matches the sources)" if record
                                  else "none matching these sources"))
    try:
        path = built_library()
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"python -m kdtree.build: {exc}", file=sys.stderr)
        return 1
    print(f"built with nvcc: {path} (build {_hash_with_nvcc(source_digest(), nvcc_version())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
