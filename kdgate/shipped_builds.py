"""The shipped kernel's sources built with extra preprocessor defines, as candidates for
``--kernel kdgate.shipped_builds:NAME`` or ``resolve()``: the fault builds of
:mod:`kdgate.broken_kernels`, and builds that fix one of the kernel's own choices so that
each branch of it can be held to the parity rule on the GPU at hand:

* ``partials_fp32`` built with KDTREE_PARTIALS_FP32: every split call writes fp32 partial
                    states (kernels/csrc/split_plan.h: partials_fp16()).
* ``partials_fp16`` built with KDTREE_PARTIALS_FP16: every split call of the rows kernel
                    launches an fp16 build, whatever its sizes (which still writes fp32 in
                    the short layout, split_plan.h: partial_build()).
* ``portable_ptx``  the shipped sources as compute_80 PTX alone (no machine code): what a GPU
                    the library has no machine code for (A100, L40S, B200) runs, through the
                    driver's compiler; on any GPU its plan takes the portable path.
"""

from __future__ import annotations


def build_with(defines: tuple[str, ...], targets=None, ptx=None):
    """A candidate launching the shipped sources built with ``defines`` (verify_op.launch_build),
    for the shipped targets or for ``targets`` (machine code) and ``ptx``; ``defines`` is kept on
    it, so a host can prebuild every such build. Each define must be a registered switch
    (kdtree.switches: a misspelt one would build the shipped code under another name)."""
    from kdtree.switches import by_name

    for name in defines:
        by_name(name)

    def fwd(*args, **kwargs):
        from kdtree.verify_op import launch_build

        launch_build(defines, *args, targets=targets, ptx=ptx, **kwargs)
        return True

    fwd.defines = tuple(defines)
    fwd.targets, fwd.ptx = targets, ptx
    fwd.writes_lse = True
    fwd.static_checks = True
    return fwd


partials_fp32 = build_with(("KDTREE_PARTIALS_FP32",))
partials_fp16 = build_with(("KDTREE_PARTIALS_FP16",))
portable_ptx = build_with((), targets=(), ptx=("80",))
