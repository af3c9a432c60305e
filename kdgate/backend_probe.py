"""Build SGLang's real ``TritonAttnBackend`` after ``load_plugins()`` and describe its
verify slot (``python -m kdgate.backend_probe [--draft] [--mha]``, one JSON line on stdout).

The backend is constructed the way SGLang's own attention unit tests construct one: with
the model runner and tiny MLA model config of ``sglang.test.kits.attention_unittest``
(real ``ReqToTokenPool`` and ``MLATokenToKVPool``), in TARGET_VERIFY mode, on the CPU.
Run it in a fresh process: plugins patch classes process-wide. Needs SGLang's import
chain for the attention backend (its pinned torch with torchvision, transformers; see
tox env ``backend``)."""

from __future__ import annotations

import argparse
import json


def describe_backend(draft: bool, mha: bool) -> dict:
    from sglang.srt.plugins import load_plugins

    load_plugins()

    import torch
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.runtime_context import get_parallel
    from sglang.test.kits.attention_unittest.attention_methods import mla_attention as kit

    case = kit.MLAAttentionCase(name="kdtree-verify-probe", backend="triton",
                                forward_mode=ForwardMode.TARGET_VERIFY, num_heads=8, page_size=1,
                                prefix_lens=(5, 9), extend_lens=(4, 4))
    config = kit.TinyMLAModelConfig(num_heads=8, kv_lora_rank=512, qk_rope_head_dim=64,
                                    hidden_size=64, context_len=64)
    if mha:
        config.attention_arch = AttentionArch.MHA
    runner = kit.MockMLAModelRunner(case=case, model_config=config, dtype=torch.bfloat16,
                                    device="cpu", max_context_len=64, kv_lora_rank=512,
                                    qk_rope_head_dim=64)
    runner.is_draft_worker = draft
    with get_parallel().override(attn_dcp_rank=0):
        backend = ATTENTION_BACKENDS["triton"](runner)
    slot = backend.verify_shared_kv_fwd
    return {
        "backend": f"{type(backend).__module__}.{type(backend).__qualname__}",
        "use_mla": bool(backend.use_mla),
        "is_draft_runner": bool(backend.is_draft_runner),
        "use_verify_shared_kv": bool(backend.use_verify_shared_kv),
        "slot": f"{type(slot).__module__}.{type(slot).__qualname__}",
        "slot_mode": getattr(slot, "mode", None),
        "slot_falls_back_to": None if getattr(slot, "fallback", None) is None else repr(slot.fallback),
        "init_wrapped": hasattr(type(backend).__init__, "__wrapped__"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draft", action="store_true", help="construct a draft-runner backend")
    parser.add_argument("--mha", action="store_true", help="a non-MLA model config")
    args = parser.parse_args()
    print(json.dumps(describe_backend(args.draft, args.mha)))


if __name__ == "__main__":
    main()
