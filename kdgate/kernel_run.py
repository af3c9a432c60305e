"""One verify case run end to end: candidate, SGLang's Triton kernel, fp64 reference,
parity reports."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kdtree.parity import ParityReport, baseline_problem, check_parity
from kdgate.verify_inputs import VerifyInputs


@dataclass
class CaseOutcome:
    report: ParityReport
    baseline: ParityReport | None
    baseline_error: str | None
    output: torch.Tensor
    lse: torch.Tensor | None
    reference: torch.Tensor
    reference_scale: torch.Tensor
    reference_lse: torch.Tensor
    chain_baseline: ParityReport | None = None   # SGLang's verify_shared_kv_fwd (chains only)
    chain_error: str | None = None

    def problems(self) -> list[str]:
        out = list(self.report.reasons)
        if self.baseline is not None:
            versus = baseline_problem(self.report, self.baseline)
            if versus:
                out.append(versus)
        return out

    def lse_problem(self) -> str | None:
        """What is wrong with the candidate's LSE against the fp64 reference's: None when it
        is finite exactly where the reference is and off by at most 1e-3 of the reference's
        largest magnitude (at least 1) there."""
        lse, ref = self.lse.double(), self.reference_lse
        finite = torch.isfinite(ref)
        if not torch.equal(torch.isfinite(lse), finite):
            return "LSE finite positions differ"
        if not finite.any():
            return None
        err = (lse[finite] - ref[finite]).abs().max().item()
        bound = 1e-3 * max(1.0, ref[finite].abs().max().item())
        return None if err <= bound else f"LSE off by {err} (bound {bound})"


def run_candidate(candidate, inputs: VerifyInputs, with_lse: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The candidate's output (poisoned with NaN first) and LSE (poisoned likewise)."""
    o = inputs.new_output()
    lse = None
    if with_lse:
        lse = torch.full(o.shape[:2], float("nan"), dtype=torch.float32, device=o.device)
    args, kwargs = inputs.call_args(o, lse)
    candidate(*args, **kwargs)
    torch.cuda.synchronize()
    return o, lse


def run_case(candidate, inputs: VerifyInputs, compare_baseline: bool = True) -> CaseOutcome:
    from kdtree.reference import verify_reference

    out, lse = run_candidate(candidate, inputs, candidate.writes_lse)
    ref, scale, ref_lse = verify_reference(*inputs.reference_args())
    report = check_parity(out, ref, scale)
    baseline = baseline_error = None
    if compare_baseline and candidate.name != "triton":
        from kdgate.baselines import triton_extend_attention

        o_base = inputs.new_output()
        args, kwargs = inputs.call_args(o_base)
        try:
            triton_extend_attention(*args, **kwargs)
            torch.cuda.synchronize()
            baseline = check_parity(o_base, ref, scale)
        except Exception as exc:  # reported, never silently passed
            baseline_error = f"{type(exc).__name__}: {exc}"
    outcome = CaseOutcome(report, baseline, baseline_error, out, lse, ref, scale, ref_lse)
    if compare_baseline and inputs.case.tree == "chain":
        from kdgate.baselines import triton_verify_shared_kv

        o_chain = inputs.new_output()
        args, kwargs = inputs.call_args(o_chain)
        try:
            if triton_verify_shared_kv(*args, **kwargs):
                torch.cuda.synchronize()
                outcome.chain_baseline = check_parity(o_chain, ref, scale)
            else:
                outcome.chain_error = "declined the shape (returned False)"
        except Exception as exc:
            outcome.chain_error = f"{type(exc).__name__}: {exc}"
    return outcome
