"""Kernel layer: the shipped kernel is a proper torch custom op (schema, fake
implementation, mutation annotations) by torch.library.opcheck."""

import pytest
import torch

from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]


@pytest.mark.parametrize("with_lse", [False, True])
def test_opcheck(candidate, cuda_device, with_lse):
    if candidate.name != "kdtree":
        pytest.skip(f"not run: opcheck applies to the shipped torch op, not {candidate.name}")
    from kdtree.verify_op import op_arguments

    inputs = build_inputs(VerifyCase(ctx=(500, 0), n=8, heads=8, seed=80), cuda_device)
    o = inputs.new_output()
    lse = torch.empty(o.shape[:2], dtype=torch.float32, device=o.device) if with_lse else None
    args, kwargs = inputs.call_args(o, lse)
    torch.library.opcheck(torch.ops.kdtree.tree_verify.default, op_arguments(*args, **kwargs))
