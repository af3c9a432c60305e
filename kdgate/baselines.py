"""SGLang 0.5.23's own kernels on the same inputs: the numbers the candidate is compared
with. ``extend_attention_fwd`` serves trees (and everything); ``verify_shared_kv_fwd``
serves chains (speculative topk 1) and is called as SGLang's chain path calls it."""

from __future__ import annotations


def triton_extend_attention(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                            qo_indptr, kv_indptr, kv_indices, custom_mask, is_causal,
                            mask_indptr, max_len_extend, k_scale=1.0, v_scale=1.0,
                            sm_scale=None, **kwargs) -> bool:
    from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd

    kwargs.pop("debug_checks", None)
    extend_attention_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                         qo_indptr, kv_indptr, kv_indices, custom_mask, is_causal, mask_indptr,
                         max_len_extend, k_scale, v_scale, sm_scale=sm_scale, **kwargs)
    return True


def triton_verify_shared_kv(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                            qo_indptr, kv_indptr, kv_indices, custom_mask, is_causal,
                            mask_indptr, max_len_extend, k_scale=1.0, v_scale=1.0,
                            sm_scale=None, **kwargs) -> bool:
    """Chains only: called with is_causal=True and no mask, as SGLang's topk-1 path does.
    Returns what SGLang's kernel returns (False: it declined the shape)."""
    from sglang.kernels.ops.attention.verify_mla import verify_shared_kv_fwd

    return bool(verify_shared_kv_fwd(q_extend, k_extend, v_extend, o_extend, k_buffer, v_buffer,
                                     qo_indptr, kv_indptr, kv_indices, None, True, None,
                                     max_len_extend, k_scale, v_scale, sm_scale=sm_scale,
                                     max_bs=qo_indptr.shape[0] - 1))
