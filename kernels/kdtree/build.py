"""Build the CUDA kernel into a shared library, on first use, cached by content.

The library is plain ``nvcc`` output behind a C ABI (no torch headers), so one build
serves any torch version. It is built for sm_90a and sm_120a into
``$KDTREE_BUILD_DIR`` (default ``~/.cache/kdtree``)/<build hash>/, under a file lock so
parallel test workers build it once. Prebuild: ``python -m kdtree.build``. Every function
that builds takes an optional ``root``: another source tree of the same layout (an older
checkout's ``kernels/csrc``, for same-run A/B timing); the hash covers the files, so two
trees share a build only when their sources are equal.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

TARGETS = ("90a", "120a")
ENTRY = "verify_api.cu"
LIBRARY = "libkdtree_verify.so"


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


def nvcc_flags(targets=TARGETS, defines=()) -> list[str]:
    flags = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo"]
    flags += [f"-D{d}" for d in defines]
    for t in targets:
        flags.append(f"-gencode=arch=compute_{t},code=sm_{t}")
    return flags


def source_tree(path: Path | str) -> Path:
    """The CUDA source directory of another tree: ``path`` itself when it holds ENTRY, else
    its ``kernels/csrc`` (a checkout's root). Raises FileNotFoundError naming ``path``."""
    path = Path(path).resolve()
    for candidate in (path, path / "kernels" / "csrc"):
        if (candidate / ENTRY).is_file():
            return candidate
    raise FileNotFoundError(f"no kdtree CUDA sources in {path}: expected {ENTRY} there or in its kernels/csrc")


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".cu", ".cuh", ".h"))


@lru_cache(maxsize=None)
def build_hash(defines: tuple[str, ...] = (), root: Path | None = None) -> str:
    """12 hex digits over the sources (of ``root``, default source_dir()), the flags and the
    nvcc version."""
    digest = hashlib.sha256()
    root = root or source_dir()
    for path in _sources(root):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    digest.update(" ".join(nvcc_flags(defines=defines)).encode())
    try:
        version = subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
    except FileNotFoundError:
        version = "no-nvcc"
    digest.update(version.encode())
    return digest.hexdigest()[:12]


def compile_library(out: Path, targets=TARGETS, defines=(), root: Path | None = None) -> None:
    """Run nvcc on ``root``'s ENTRY (default source_dir()); raises RuntimeError with nvcc's
    output on failure."""
    cmd = [nvcc_path(), *nvcc_flags(targets, defines), "-o", str(out), str((root or source_dir()) / ENTRY)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"nvcc failed ({done.returncode}):\n{' '.join(cmd)}\n{done.stdout}{done.stderr}")


def library_path(defines: tuple[str, ...] = (), root: Path | None = None) -> Path:
    """Path of the built library, building it first if this build hash has none.
    ``defines`` builds a variant (the gate's negative controls use fault macros); ``root``
    another source tree (source_tree())."""
    cache = Path(os.environ.get("KDTREE_BUILD_DIR", Path.home() / ".cache" / "kdtree"))
    target = cache / build_hash(tuple(defines), root) / LIBRARY
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            tmp = target.with_suffix(f".tmp{os.getpid()}.so")
            compile_library(tmp, defines=defines, root=root)
            os.replace(tmp, target)
    return target


def main() -> int:
    path = library_path()
    print(f"kdtree kernel build {build_hash()}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
