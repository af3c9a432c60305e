"""The shipped kernel's sources built with extra preprocessor defines, as candidates for
``--kernel kdgate.shipped_builds:NAME`` or ``resolve()``: the fault builds of
:mod:`kdgate.broken_kernels`, and builds that fix one of the kernel's own choices so that
each branch of it can be held to the parity rule on the GPU at hand:

* ``partials_fp32`` built with KDTREE_PARTIALS_FP32: every split call writes fp32 partial
                    states (kernels/csrc/split_plan.h: partials_fp16()).
* ``partials_fp16`` built with KDTREE_PARTIALS_FP16: every split call of the rows kernel
                    launches an fp16 build, whatever its sizes (which still writes fp32 in
                    the short layout, split_plan.h: partial_build()).
"""

from __future__ import annotations


def build_with(defines: tuple[str, ...]):
    """A candidate launching the shipped sources built with ``defines`` (verify_op.launch_build);
    ``defines`` is kept on it, so a host can prebuild every such build."""
    def fwd(*args, **kwargs):
        from kdtree.verify_op import launch_build

        launch_build(defines, *args, **kwargs)
        return True

    fwd.defines = tuple(defines)
    fwd.writes_lse = True
    fwd.static_checks = True
    return fwd


partials_fp32 = build_with(("KDTREE_PARTIALS_FP32",))
partials_fp16 = build_with(("KDTREE_PARTIALS_FP16",))
