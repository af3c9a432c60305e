"""Kernel layer: malformed calls raise TypeError/ValueError naming the argument, before
anything is launched (the poisoned output stays untouched); debug mode checks lengths on
the host and slot indices on the device."""

import re

import pytest
import torch

from kdgate.verify_inputs import VerifyCase, build_inputs

pytestmark = [pytest.mark.kernel, pytest.mark.gpu]

CASE = VerifyCase(ctx=(300, 40), n=8, heads=8, seed=70)
ARG = {name: i for i, name in enumerate((
    "q_extend", "k_extend", "v_extend", "o_extend", "k_buffer", "v_buffer", "qo_indptr",
    "kv_indptr", "kv_indices", "custom_mask", "is_causal", "mask_indptr", "max_len_extend",
    "k_scale", "v_scale"))}


def replace(name, make):
    return lambda args, kw: (args.__setitem__(ARG[name], make(args[ARG[name]])) if name in ARG
                             else kw.__setitem__(name, make(kw.get(name))))


BAD = {  # case id: (mutation of (args list, kwargs), exception, message fragment)
    "q-dtype": (replace("q_extend", lambda t: t.float()), TypeError, "q_extend must have dtype"),
    "q-rank": (replace("q_extend", lambda t: t[:, 0]), ValueError, "q_extend must have 3 dimensions"),
    "q-head-dim": (replace("q_extend", lambda t: t[..., :512].contiguous()), ValueError, "q_extend must have shape"),
    "q-cpu": (replace("q_extend", lambda t: t.cpu()), ValueError, "q_extend must be on a CUDA device"),
    "q-noncontig-last": (replace("q_extend", lambda t: torch.zeros(*t.shape[:2], 1152, dtype=t.dtype, device=t.device)[..., ::2]), ValueError, "q_extend must be contiguous in its last dimension"),
    "q-too-many-heads": (replace("q_extend", lambda t: t.repeat(1, 17, 1)), ValueError, "1 to 128 heads"),
    "k-extend-dtype": (replace("k_extend", lambda t: t.half()), TypeError, "k_extend must have dtype"),
    "k-extend-shape": (replace("k_extend", lambda t: t[:-1]), ValueError, "k_extend must have shape"),
    "k-extend-heads": (replace("k_extend", lambda t: t.repeat(1, 2, 1)), ValueError, "k_extend must have shape"),
    "v-extend-dim": (replace("v_extend", lambda t: torch.cat((t, t[..., :64]), -1)), ValueError, "v_extend must have shape"),
    "v-extend-device": (replace("v_extend", lambda t: t.cpu()), ValueError, "v_extend must be on"),
    "o-dtype": (replace("o_extend", lambda t: t.float()), TypeError, "o_extend must have dtype"),
    "o-shape": (replace("o_extend", lambda t: t[:, :4]), ValueError, "o_extend must have shape"),
    "o-misaligned": (replace("o_extend", lambda t: torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape)), ValueError, "o_extend must start on a 16-byte"),
    "k-buffer-dtype": (replace("k_buffer", lambda t: t.float()), TypeError, "k_buffer must have dtype"),
    "k-buffer-dim": (replace("k_buffer", lambda t: t[..., :512]), ValueError, "k_buffer must have shape"),
    "v-buffer-not-view": (replace("v_buffer", lambda t: t.clone()), ValueError, "v_buffer must be the first 512 dims"),
    "qo-dtype": (replace("qo_indptr", lambda t: t.float()), TypeError, "qo_indptr must have dtype"),
    "qo-rank": (replace("qo_indptr", lambda t: t[None]), ValueError, "qo_indptr must have 1 dimensions"),
    "qo-too-short": (replace("qo_indptr", lambda t: t[:1]), ValueError, "qo_indptr must have bs+1 >= 2"),
    "kv-indptr-length": (replace("kv_indptr", lambda t: t[:-1]), ValueError, "kv_indptr must have as many entries"),
    "kv-indices-dtype": (replace("kv_indices", lambda t: t.int()), TypeError, "kv_indices must have dtype"),
    "mask-dtype": (replace("custom_mask", lambda t: t.float()), TypeError, "custom_mask must have dtype"),
    "mask-indptr-missing": (replace("mask_indptr", lambda t: None), ValueError, "mask_indptr is required"),
    "mask-indptr-dtype": (replace("mask_indptr", lambda t: t.int()), TypeError, "mask_indptr must have dtype"),
    "mask-indptr-length": (replace("mask_indptr", lambda t: t[:-1]), ValueError, "mask_indptr must have as many"),
    "max-len-zero": (replace("max_len_extend", lambda v: 0), ValueError, "max_len_extend must be in 1..64"),
    "max-len-too-big": (replace("max_len_extend", lambda v: 65), ValueError, "max_len_extend must be in 1..64"),
    "max-len-float": (replace("max_len_extend", lambda v: 8.0), TypeError, "max_len_extend must be an int"),
    "k-scale": (replace("k_scale", lambda v: 0.5), ValueError, "k_scale must be 1.0"),
    "sm-scale-negative": (replace("sm_scale", lambda v: -1.0), ValueError, "sm_scale must be a finite positive"),
    "sm-scale-nan": (replace("sm_scale", lambda v: float("nan")), ValueError, "sm_scale must be a finite positive"),
    "logit-cap": (replace("logit_cap", lambda v: 30.0), ValueError, "logit_cap must be 0.0"),
    "sinks": (replace("sinks", lambda v: torch.zeros(8)), ValueError, "sinks must be None"),
    "window": (replace("sliding_window_size", lambda v: 128), ValueError, "sliding_window_size must be -1"),
    "lse-dtype": (replace("lse_extend", lambda v: torch.zeros(16, 8, dtype=torch.float64, device="cuda")), TypeError, "lse_extend must have dtype"),
    "lse-shape": (replace("lse_extend", lambda v: torch.zeros(16, 4, device="cuda")), ValueError, "lse_extend must have shape"),
    "unknown-kwarg": (replace("page_sizee", lambda v: 1), TypeError, "unsupported argument"),
    "chain-not-causal": (lambda a, k: (a.__setitem__(ARG["custom_mask"], None), a.__setitem__(ARG["is_causal"], False)), ValueError, "is_causal must be True"),
}
DATA_BAD = {  # need debug mode: read on the host before launch
    "negative-prefix": (lambda a, k: a[ARG["kv_indptr"]].copy_(torch.tensor([0, 300, 200], device="cuda").to(a[ARG["kv_indptr"]].dtype)), "negative prefix length"),
    "too-many-drafts": (lambda a, k: a[ARG["qo_indptr"]].copy_(torch.tensor([0, 12, 16], device="cuda").to(a[ARG["qo_indptr"]].dtype)), "draft tokens"),
    "mask-too-short": (lambda a, k: a.__setitem__(ARG["custom_mask"], a[ARG["custom_mask"]][:-10]), "custom_mask is too short"),
    "indices-too-short": (lambda a, k: a.__setitem__(ARG["kv_indices"], a[ARG["kv_indices"]][:100]), "outside kv_indices"),
}


def prepared(cuda_device, mutate, debug=False):
    """A valid call, mutated; the output is poisoned with 7.0 so a launch would show."""
    inputs = build_inputs(CASE, cuda_device)
    o = inputs.new_output(poison=7.0)
    args, kwargs = inputs.call_args(o)
    args = list(args)
    if debug:
        kwargs["debug_checks"] = True
    mutate(args, kwargs)
    return o, args, kwargs


@pytest.mark.parametrize("name", BAD)
def test_bad_argument_is_named_before_launch(candidate, cuda_device, name):
    if not candidate.static_checks:
        pytest.skip(f"not run: candidate {candidate.name} does not declare static argument checks")
    mutate, exc, fragment = BAD[name]
    o, args, kwargs = prepared(cuda_device, mutate)
    with pytest.raises(exc, match=re.escape(fragment)):
        candidate(*args, **kwargs)
    torch.cuda.synchronize()
    assert bool((o.float() == 7.0).all()), "the output was written: something launched"


@pytest.mark.parametrize("name", DATA_BAD)
def test_bad_lengths_are_caught_in_debug_mode(candidate, cuda_device, name):
    if not candidate.debug_checks:
        pytest.skip(f"not run: candidate {candidate.name} has no debug mode")
    mutate, fragment = DATA_BAD[name]
    o, args, kwargs = prepared(cuda_device, mutate, debug=True)
    with pytest.raises(ValueError, match=re.escape(fragment)):
        candidate(*args, **kwargs)
    torch.cuda.synchronize()
    assert bool((o.float() == 7.0).all()), "the output was written: the check came after a launch"


def test_out_of_range_slot_is_caught_on_the_device(candidate, cuda_device):
    if not candidate.debug_checks:
        pytest.skip(f"not run: candidate {candidate.name} has no debug mode")

    def corrupt(args, kwargs):
        args[ARG["kv_indices"]][5] = 10 ** 9
    o, args, kwargs = prepared(cuda_device, corrupt, debug=True)
    with pytest.raises(ValueError, match=re.escape("kv_indices holds slot(s) outside")):
        candidate(*args, **kwargs)


def test_out_of_range_slot_without_debug_reads_nothing_outside(candidate, cuda_device):
    """Without debug mode the kernel clamps the index: no fault, finite output."""
    if candidate.name != "kdtree":
        pytest.skip(f"not run: clamping is a property of the shipped kernel, not {candidate.name}")
    inputs = build_inputs(CASE, cuda_device)
    inputs.kv_indices[5] = 10 ** 9
    o = inputs.new_output()
    args, kwargs = inputs.call_args(o)
    candidate(*args, **kwargs)
    torch.cuda.synchronize()
    assert torch.isfinite(o.float()).all()
