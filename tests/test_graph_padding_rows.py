"""Which rows the in-graph validator skips: SGLang's CUDA-graph padding requests (prefix of
one token at the reserved slot 0), found on the device without host reads."""

import pytest
import torch

from kdtree.verify_override import padded_rows


def batch(prefix_slots: list[list[int]], n: int, indptr_dtype=torch.int64):
    qo = torch.arange(0, (len(prefix_slots) + 1) * n, n, dtype=indptr_dtype)
    kv = torch.tensor([0] + torch.tensor([len(s) for s in prefix_slots]).cumsum(0).tolist(),
                      dtype=indptr_dtype)
    indices = torch.tensor([slot for slots in prefix_slots for slot in slots] + [0] * 5)  # graph buffers are larger
    return qo, kv, indices


@pytest.mark.parametrize("indptr_dtype", [torch.int32, torch.int64])
def test_padding_requests_are_the_ones_at_slot_zero(indptr_dtype):
    qo, kv, indices = batch([[7, 3, 9], [0], [5], [0]], n=4, indptr_dtype=indptr_dtype)
    assert padded_rows(qo, kv, indices, 16).tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4


def test_real_requests_with_empty_or_long_prefixes_are_kept():
    qo, kv, indices = batch([[], [0, 4], [11]], n=2)       # slot 0 first but two tokens: not padding
    assert not padded_rows(qo, kv, indices, 6).any()

