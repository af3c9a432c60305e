"""kdgate.capture_drift: a regenerated capture passes as rounding-only when only float
rounding moved, and fails on any change to what is discrete or on a larger float change."""

import pytest
import torch

from kdgate.capture_drift import activation_drift, compare


def capture():
    torch.manual_seed(0)
    kv = torch.randn(8, 576).to(torch.bfloat16)
    v_extend = torch.randn(2, 1, 512).to(torch.bfloat16)
    return {
        "q": torch.randn(2, 3, 576).to(torch.bfloat16),
        "k_extend": torch.randn(2, 1, 576).to(torch.bfloat16),
        "v_extend": v_extend,
        "kv_rows": kv,
        "kv_indices": torch.arange(8),
        "custom_mask": torch.ones(20, dtype=torch.uint8),
        "reference_out": torch.randn(2, 3, 512, dtype=torch.float64),
        "reference_lse": torch.randn(2, 3, dtype=torch.float64) + 10,
    }


ENTRY = {"name": "c", "sha256": "a" * 64, "bytes": 10, "draft_tokens": [[1, 2]], "parents": [[-1, 0]]}


def next_bf16_up(x: torch.Tensor) -> torch.Tensor:
    """The bf16 value one step away from zero (|x| grows by one ULP)."""
    bits = x.view(torch.int16)
    return (bits + 1).view(torch.bfloat16)


def test_a_one_ulp_flip_of_the_largest_element_is_rounding():
    a = capture()
    b = {k: v.clone() for k, v in a.items()}
    row = b["kv_rows"][3]
    j = int(row.float().abs().argmax())
    row[j] = next_bf16_up(row[j:j + 1])[0]
    b["reference_out"] += 1e-6
    verdict, findings = compare(a, b, ENTRY, {**ENTRY, "sha256": "b" * 64})
    assert verdict == "rounding", findings
    assert any(f.startswith("kv_rows: 1 of 4608 elements differ") for f in findings)


@pytest.mark.parametrize("change", ["activation", "index", "mask", "reference", "lse", "shape", "names", "tokens"])
def test_anything_beyond_rounding_is_different(change):
    a = capture()
    b = {k: v.clone() for k, v in a.items()}
    entry = dict(ENTRY)
    if change == "activation":  # four ULPs of the row's largest magnitude
        row = b["q"][1, 2]
        b["q"][1, 2, 7] = row[7] + 4 * 2.0 ** (torch.floor(torch.log2(row.float().abs().max())) - 7)
    elif change == "index":
        b["kv_indices"][5] = 6
    elif change == "mask":
        b["custom_mask"][3] = 0
    elif change == "reference":
        b["reference_out"][0, 0, 0] += 0.1 * float(a["kv_rows"][:, :512].float().abs().max())
    elif change == "lse":
        b["reference_lse"][1, 1] += 0.5
    elif change == "shape":
        b["kv_rows"] = b["kv_rows"][:7]
    elif change == "names":
        del b["custom_mask"]
    elif change == "tokens":
        entry["draft_tokens"] = [[1, 3]]
    verdict, findings = compare(a, b, ENTRY, entry)
    assert verdict == "different", findings


def test_drift_is_counted_in_ulps_of_the_rows_largest_magnitude():
    a = torch.tensor([[4.0, 0.001], [0.0, 0.0]], dtype=torch.bfloat16)
    b = torch.tensor([[4.0, 0.002], [0.0, 0.0]], dtype=torch.bfloat16)
    ulp_of_4 = 2.0 ** (2 - 7)
    assert activation_drift(a, b) == pytest.approx(float(b[0, 1].double() - a[0, 1].double()) / ulp_of_4)
    assert activation_drift(a, torch.tensor([[4.0, 0.001], [0.0, 1e-3]], dtype=torch.bfloat16)) == float("inf")
