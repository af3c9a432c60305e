"""The host's VerifyParams mirror, read from a build's verify_params.h (kdtree.params_mirror):
what it reads, what it refuses, and how an older tree's struct is filled (kdtree-gate ab
--against-tree). The shipped mirror's offsets against the compiler's are in test_kernel_build."""

import ctypes
import shutil

import pytest

from kdtree import build
from kdtree.params_mirror import fill_params, params_fields, params_struct
from kdtree.verify_op import VerifyParams

HEADER = """
// a comment with struct VerifyParams { int x; };
struct VerifyParams {
  const void* q;   // pointer
  float* ws_acc;   /* pointer, block comment; */
  int64_t bs, heads;
  double scale_log2;
};
"""


def test_members_are_read_in_order_with_their_kinds():
    assert params_fields(HEADER) == [("q", ctypes.c_void_p), ("ws_acc", ctypes.c_void_p), ("bs", ctypes.c_int64),
                                     ("heads", ctypes.c_int64), ("scale_log2", ctypes.c_double)]


@pytest.mark.parametrize("text, message", [
    ("struct Other { int64_t a; };", "no 'struct VerifyParams"),
    ("struct VerifyParams { int a; };", "member 'a' has type 'int'"),
    ("struct VerifyParams { int64_t a, 2b; };", "cannot read the member '2b'"),
    ("struct VerifyParams { int64_t a; double a; };", "declares a member twice"),
    ("struct VerifyParams { };", "has no members"),
])
def test_a_header_it_cannot_mirror_is_refused_naming_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        params_fields(text, "old/verify_params.h")


def test_the_shipped_mirror_is_the_shipped_header():
    text = (build.source_dir() / "verify_params.h").read_text()
    assert VerifyParams._fields_ == params_fields(text)
    assert "layout_flag" in dict(VerifyParams._fields_)
    assert ctypes.sizeof(VerifyParams) == 8 * len(VerifyParams._fields_)


def older_tree(tmp_path):
    """A copy of the shipped sources whose struct lacks layout_flag, as before the batch layout."""
    root = tmp_path / "old" / "kernels" / "csrc"
    shutil.copytree(build.source_dir(), root)
    header = root / "verify_params.h"
    text = header.read_text()
    start = text.index("  int* layout_flag;")
    end = text.index("  // strides in elements")
    header.write_text(text[:start] + text[end:])
    return tmp_path / "old", root


def test_an_older_tree_is_filled_with_its_own_layout(tmp_path):
    checkout, root = older_tree(tmp_path)
    assert build.source_tree(checkout) == root.resolve() and build.source_tree(root) == root.resolve()
    old = params_struct(root)
    assert "layout_flag" not in dict(old._fields_)
    assert ctypes.sizeof(old) == ctypes.sizeof(VerifyParams) - 8
    values = {name: 0 for name, _ in VerifyParams._fields_}
    values.update(bs=3, scale_log2=0.5, layout_flag=1234)
    p = fill_params(old, values)
    assert (p.bs, p.scale_log2) == (3, 0.5)
    assert not hasattr(p, "layout_flag")


def test_a_struct_with_a_member_the_host_does_not_fill_is_refused():
    values = {name: 0 for name, _ in VerifyParams._fields_ if name != "base_splits"}
    with pytest.raises(ValueError, match=r"does not fill: \['base_splits'\]"):
        fill_params(VerifyParams, values)


def test_a_tree_without_sources_is_refused_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        build.source_tree(tmp_path)


def test_the_build_hash_follows_a_trees_sources(tmp_path):
    _, root = older_tree(tmp_path)
    same = tmp_path / "same"
    shutil.copytree(build.source_dir(), same)
    assert build.build_hash((), same) == build.build_hash()
    assert build.build_hash((), root) != build.build_hash()


def test_the_op_module_imports_without_sources_and_says_so_when_the_struct_is_asked_for():
    """In a fresh interpreter whose kdtree.build finds no CUDA sources."""
    import os
    import subprocess
    import sys

    program = (
        "import pytest, kdtree.build as b\n"
        "def none():\n"
        "    raise FileNotFoundError('kdtree CUDA sources (verify_api.cu) not found')\n"
        "b.source_dir = none\n"
        "import kdtree.verify_op as v\n"
        "with pytest.raises(FileNotFoundError, match='not found'):\n"
        "    v.VerifyParams\n"
        "print('ok')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
