"""The host-side plan of the built library (kernel path, splits, row blocks), called
through ctypes on a machine without a GPU (planning touches no device)."""

import ctypes

import pytest

from kdtree import build
from kdtree.verify_op import (PATH_NAMES, PATHS, VerifyParams, declare_abi, lengths_uneven, partial_layout,
                              partials_fp16)

H200_SMEM, SM120_SMEM = 232448, 101376   # opt-in shared memory per block (bytes)
BUDGET = 512 << 20


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    try:
        build.nvcc_path()
    except FileNotFoundError as exc:
        pytest.skip(f"not run: {exc}")
    out = tmp_path_factory.mktemp("plan") / "libkdtree_verify.so"
    build.compile_library(out)
    return declare_abi(ctypes.CDLL(str(out)), VerifyParams)


def plan(lib, bs, heads, n, sms=132, smem=H200_SMEM, budget=BUDGET, request="auto", capability=90):
    """(code, (path, grid splits, row blocks, base splits))."""
    out = (ctypes.c_int64 * 4)()
    code = lib.kdtree_plan(bs, heads, n, sms, smem, capability, budget, PATHS[request], out)
    return code, tuple(out)


def test_auto_picks_wgmma_on_hopper_portable_on_sm120_and_from_ptx(lib):
    assert plan(lib, 1, 8, 4)[1][0] == 4            # 32 rows on 9.0: wgmma
    assert plan(lib, 1, 8, 16)[1][0] == 5           # 128 rows on 9.0: wgmma, 64-row blocks
    assert plan(lib, 1, 8, 16, smem=SM120_SMEM, capability=120)[1][0] == 0
    # code compiled by the driver from the compute_80 PTX (A100, L40S, B200): portable only,
    # even where the tiled path's shared memory would fit
    assert plan(lib, 1, 8, 4, capability=80)[1][0] == 0
    assert plan(lib, 1, 8, 16, capability=80)[1][0] == 0
    assert plan(lib, 1, 8, 16, capability=80, request="tiled")[0] == 1


def test_tiled_path_fits_hopper_and_not_sm120(lib):
    assert lib.kdtree_path_smem(2) <= H200_SMEM < lib.kdtree_path_smem(2) + 4096
    assert lib.kdtree_path_smem(0) <= SM120_SMEM < lib.kdtree_path_smem(1)
    assert plan(lib, 1, 8, 4, request="tiled")[1][0] == 1    # 32 rows: 32-row blocks
    assert plan(lib, 1, 8, 16, request="tiled")[1][0] == 2   # 128 rows: 64-row blocks
    assert plan(lib, 1, 8, 16, request="portable")[1][0] == 0
    assert plan(lib, 1, 8, 16, smem=SM120_SMEM, request="tiled")[0] == 1   # refused, not faked


def test_wgmma_path_only_on_compute_capability_9_0(lib):
    assert max(lib.kdtree_path_smem(p) for p in (3, 4, 5)) <= H200_SMEM
    assert plan(lib, 1, 8, 1, request="wgmma")[1][0] == 3          # 8 rows: 16-row blocks
    assert plan(lib, 1, 8, 4, request="wgmma")[1][0] == 4          # 32 rows
    assert plan(lib, 1, 33, 1, request="wgmma")[1][:3:2] == (5, 1)  # 33 rows: the rows kernel, one padded block
    assert plan(lib, 1, 8, 16, request="wgmma")[1][:3:2] == (5, 2)  # 128 rows: 2 blocks of 64
    assert plan(lib, 1, 8, 16, request="wgmma", capability=120)[0] == 1
    assert plan(lib, 1, 8, 16, request="wgmma", smem=SM120_SMEM)[0] == 1
    assert plan(lib, 1, 8, 16, request="wgmma", capability=80)[0] == 1


@pytest.mark.parametrize("request_path", ["auto", "tiled", "wgmma", "portable"])
@pytest.mark.parametrize("heads, n", [(8, 1), (8, 2), (8, 4), (8, 16), (16, 64)])
def test_the_gate_fits_tiles_with_the_plans_row_blocks(lib, request_path, heads, n):
    """kdgate.perf_limits counts a path's row blocks as the plan does."""
    from kdgate.perf_limits import PATH_SHAPES
    from kdtree.verify_op import PATH_NAMES

    code, (path, _, row_blocks, _) = plan(lib, 1, heads, n, request=request_path)
    assert code == 0 and row_blocks == -(-n * heads // PATH_SHAPES[PATH_NAMES[path]].block_rows)


@pytest.mark.parametrize("request_path", ["auto", "tiled", "wgmma"])
@pytest.mark.parametrize("bs, heads, n", [(1, 8, 4), (1, 8, 16), (1, 16, 64), (4, 8, 16), (32, 8, 16), (128, 16, 4)])
def test_splits_fill_the_sms_in_whole_waves(lib, bs, heads, n, request_path):
    # an equal-length batch runs its base splits (the grid's extra ones stay empty)
    code, (path, grid, row_blocks, splits) = plan(lib, bs, heads, n, request=request_path)
    assert code == 0 and 1 <= splits <= grid <= 192 and grid in (splits, 2 * splits)
    assert row_blocks == -(-n * heads // {2: 64, 5: 64, 3: 16}.get(path, 32))
    ctas = bs * row_blocks * splits
    waves = -(-ctas // 132)
    assert ctas / (132 * waves) >= 0.95, f"{ctas} CTAs use {ctas / (132 * waves):.0%} of {waves} wave(s)"


@pytest.mark.parametrize("request_path", ["auto", "tiled", "wgmma"])
@pytest.mark.parametrize("sms", [132, 148, 78])
def test_one_row_block_takes_one_split_per_sm(lib, request_path, sms):
    # bs 1, 32 or 64 rows: one CTA per SM in one wave; 128 splits on 132 SMs left 4 idle and,
    # at ctx 16k + N (257 tiles of 64), gave one split 3 tiles where 132 splits give each <= 2
    for heads, n in ((8, 4), (8, 8), (16, 4)):
        code, (_, splits, row_blocks, base) = plan(lib, 1, heads, n, sms=sms, request=request_path)
        assert code == 0 and row_blocks == 1 and splits == base == sms


def partial_row_bytes(lib) -> int:
    """Workspace bytes per query row and slot: the partial values and their 32-bit scalars."""
    value_bytes, scalars = partial_layout(lib)
    return value_bytes + 4 * scalars


def test_the_workspace_holds_fp32_values_and_four_scalars(lib):
    # room for 512 fp32 values (the larger format); m, l, the four chunks' exponents of fp16
    # values and one unused word (verify_params.h)
    assert partial_layout(lib) == (512 * 4, 4)


PATH_CODES = {name: code for code, name in PATH_NAMES.items()}


@pytest.mark.parametrize("path", ["portable", "tiled-32", "tiled-64", "wgmma-16", "wgmma-32"])
def test_only_the_rows_kernel_writes_fp16_partials(lib, path):
    assert not partials_fp16(PATH_CODES[path], 8, 8, 1, 132, 1 << 20, lib)


@pytest.mark.parametrize("n_max, heads, bs", [(32, 8, 1), (64, 8, 1), (16, 8, 32), (8, 16, 64)])
def test_the_seesaw_kernel_keeps_fp32_partials(lib, n_max, heads, bs):
    # 256+ rows per request, or 128+ in a batch of 32+ (split_plan.h: runs_seesaw())
    assert not partials_fp16(PATH_CODES["wgmma-64"], n_max, heads, bs, 132, 1 << 20, lib)


# (splits, rows, fp16) for the rows kernel (8 draft tokens x 8 heads, one request): fp16 from
# 16 MiB of fp32 values with 16 splits or more (split_plan.h), whatever the lengths
FP16_THRESHOLDS = [
    (132, 64, True),           # 16.5 MiB of values (bs 1, 64 rows on the H200)
    (16, 512, True),           # exactly 16 MiB
    (16, 511, False),          # just below 16 MiB
    (15, 1024, False),         # 30 MiB of values, but too few splits
    (192, 1 << 40, True),      # past 2^30 rows: no overflow in the byte count
    (1, 1 << 20, False),       # one split writes no partial state
]


@pytest.mark.parametrize("splits, rows, fp16", FP16_THRESHOLDS)
def test_fp16_partials_past_the_threshold(lib, splits, rows, fp16):
    assert partials_fp16(PATH_CODES["wgmma-64"], 8, 8, 1, splits, rows, lib) == fp16


@pytest.mark.parametrize("args, name", [((5, 8, 8, 1, 132, -1), "rows"), ((5, 8, 8, 1, 132, 1.5), "rows"),
                                        ((-1, 8, 8, 1, 132, 64), "path"), ((5, 8, 8, 1, True, 64), "splits"),
                                        ((5, "8", 8, 1, 132, 64), "n_max"), ((5, 8, None, 1, 132, 64), "heads"),
                                        ((5, 8, 8, -2, 132, 64), "bs")])
def test_partials_fp16_refuses_bad_arguments_by_name(lib, args, name):
    with pytest.raises(ValueError, match=f"{name} must be an int"):
        partials_fp16(*args, lib=lib)


@pytest.mark.parametrize("args", [(6, 8, 8, 1, 132, 64), (5, 8, 8, 1, 193, 64), (5, 8, 8, 1, 0, 64),
                                  (5, 8, 8, 1, 132, 0), (5, 0, 8, 1, 132, 64), (5, 65, 8, 1, 132, 64),
                                  (5, 8, 0, 1, 132, 64), (5, 8, 8, 0, 132, 64)])
def test_partials_fp16_passes_on_what_the_library_refuses(lib, args):
    with pytest.raises(ValueError, match="the library refused"):
        partials_fp16(*args, lib=lib)


def test_a_library_without_the_rule_writes_fp32_partials():
    # an older tree, launched by a same-run A/B
    assert not partials_fp16(5, 8, 8, 1, 132, 64, lib=object())


def test_a_library_without_the_layout_call_has_fp32_partials():
    # an older tree, launched by a same-run A/B, gets the workspace it writes
    assert partial_layout(object()) == (512 * 4, 2)


def test_workspace_budget_bounds_the_splits(lib):
    code, (_, splits, _, _) = plan(lib, 1, 8, 16, budget=0)
    assert code == 0 and splits == 1
    rows = 16 * 8
    code, (_, splits, _, _) = plan(lib, 1, 8, 16, budget=3 * rows * partial_row_bytes(lib))
    assert code == 0 and 2 <= splits <= 3
    code, (_, splits, _, _) = plan(lib, 1, 8, 16, budget=3 * rows * partial_row_bytes(lib) - 1)
    assert code == 0 and splits <= 2


@pytest.mark.parametrize("args", [(0, 8, 4), (1, 0, 4), (1, 8, 0), (1, 8, 65), (1, (1 << 20) + 1, 1)])
def test_bad_sizes_are_refused(lib, args):
    assert plan(lib, *args)[0] == 2


@pytest.mark.parametrize("bs, heads, n", [(4, 8, 16), (8, 16, 4), (1, 8, 64)])
def test_one_full_wave_beats_two_waves_of_half_the_work(lib, bs, heads, n):
    # 8 row blocks in all: 16 splits fill 128 of 132 SMs once; 33 would fill them twice
    # with half the work each, paying each CTA's fixed cost twice (measured 1.19-1.25x
    # faster with 16 on the H200)
    code, (_, slots, row_blocks, splits) = plan(lib, bs, heads, n)
    assert code == 0 and bs * row_blocks == 8 and splits == 16
    assert slots == (32 if bs > 1 else 16)  # a batch's workspace: twice the grid's splits (split_plan.h)


@pytest.mark.parametrize("bs, heads, n, path, budget_rows, batch_layout", [
    (32, 8, 16, "auto", None, True),       # 64 row blocks x 2 splits: 4 slots per request
    (32, 8, 16, "tiled", None, True),
    (32, 16, 4, "auto", None, True),       # 32 row blocks x 4 splits: 8 slots
    (4, 8, 16, "auto", None, True),        # 16 splits per request: 32 slots, the grid unchanged
    (1, 8, 16, "auto", None, False),       # one request: nothing to balance
    (128, 16, 4, "auto", None, False),     # one split per request: no combine is added for it
    (32, 8, 16, "portable", None, False),  # the portable path plans its own splits
    (32, 8, 16, "auto", 3 * 32 * 128, False),  # 2 x 2 slots would pass the workspace budget
])
def test_batches_get_twice_the_slots_for_the_batch_layout(lib, bs, heads, n, path, budget_rows, batch_layout):
    # budget_rows: a budget of that many query rows' partial states (None: the default budget)
    budget = BUDGET if budget_rows is None else budget_rows * partial_row_bytes(lib)
    code, (_, slots, _, grid_splits) = plan(lib, bs, heads, n, request=path, budget=budget)
    assert code == 0 and grid_splits >= 1
    assert slots == (2 * grid_splits if batch_layout else grid_splits), f"slots {slots}, grid splits {grid_splits}"


def combine_shape(lib, rows, splits, sms=132):
    out = (ctypes.c_int64 * 3)()
    code = lib.kdtree_combine_shape(rows, splits, sms, out)
    return code, tuple(out)


def test_combine_takes_the_in_flight_build_only_when_its_grid_fits_one_wave_of_it(lib):
    # (warps per query row, CTAs, CTAs per SM); chunk kernel: 4 chunks of 128 columns per row
    # and 1-8 warps per chunk; row kernel: one warp per row; 8 warps per CTA
    assert combine_shape(lib, 64, 132) == (0, (32, 256, 4))     # bs 1, one split per SM
    assert combine_shape(lib, 64, 192) == (0, (32, 256, 4))     # the most splits (24 per warp)
    assert combine_shape(lib, 256, 33) == (0, (32, 1024, 8))    # 33 splits: 1,024 CTAs > 4 x 132
    assert combine_shape(lib, 256, 16) == (0, (8, 256, 4))
    assert combine_shape(lib, 1056, 8) == (0, (4, 528, 4))      # exactly one wave of 4 per SM
    assert combine_shape(lib, 1056, 9) == (0, (8, 1056, 8))     # 9 splits: no row kernel
    assert combine_shape(lib, 1056, 9, sms=264) == (0, (8, 1056, 4))


def test_the_row_kernel_takes_few_splits_of_many_rows(lib):
    # where the chunk kernel would need its 8-per-SM build and there are at most 8 splits
    assert combine_shape(lib, 1058, 8) == (0, (1, 133, 4))
    assert combine_shape(lib, 4096, 2) == (0, (1, 512, 4))      # bs 32 x 128 rows
    assert combine_shape(lib, 4096, 8, sms=1024) == (0, (4, 2048, 4))  # one wave of the chunk kernel
    assert combine_shape(lib, 100_000, 2, sms=1) == (0, (1, 12500, 4))  # always its 4-per-SM build


@pytest.mark.parametrize("rows,splits,sms", [(0, 4, 132), (64, 1, 132), (64, 193, 132), (64, 4, 0)])
def test_combine_shape_refuses_bad_sizes(lib, rows, splits, sms):
    assert combine_shape(lib, rows, splits, sms)[0] == 2


@pytest.mark.parametrize("path, n, heads, bs, balances", [
    (5, 32, 8, 2, True),     # 256 rows: the seesaw kernel at any batch size
    (5, 16, 8, 32, True),    # 128 rows from bs 32: the seesaw kernel
    (5, 16, 8, 4, False),    # 128 rows below bs 32: the rows kernel, the batch layout
    (5, 8, 8, 32, False),    # 64 rows: the rows kernel
    (4, 4, 8, 8, False),     # 32 rows: the transposed kernel
    (2, 32, 8, 8, False),    # tiled
])
def test_only_the_seesaw_kernel_balances_its_grid(lib, path, n, heads, bs, balances):
    assert bool(lib.kdtree_grid_balances(path, n, heads, bs)) == balances


def test_a_seesaw_batch_gets_the_balanced_grid_only_up_to_4_splits(lib):
    # bs 32 x 128 rows: 2 grid splits, a balanced grid of 4; bs 2 x 256 rows: 16 splits, none
    assert plan(lib, 32, 8, 16)[1][1::2] == (4, 2)
    code, (_, slots, _, grid_splits) = plan(lib, 2, 8, 32)
    assert code == 0 and grid_splits > 4 and slots == grid_splits


def test_sanitize_runs_uneven_batches_on_each_wgmma_kernels_batch_build(lib):
    """The launch takes a kernel's batch-layout build when the plan gives more slots than grid
    splits and the kernel does not balance its grid (has_batch_layout()); the sanitizer run
    (kdgate.sanitize_run) must reach that build of the 16-, 32- and 64-row kernels with an
    uneven batch, so their batch layout's code runs under memcheck and racecheck."""
    from kdgate.sanitize_run import CASES

    reached = set()
    for case in CASES:
        bs, heads, n = len(case.ctx), case.heads, case.n
        code, (path, slots, _, base) = plan(lib, bs, heads, n)
        assert code == 0
        uneven = lengths_uneven([ctx + n for ctx in case.ctx], lib=lib)  # the kernels' rule
        if slots > base and not lib.kdtree_grid_balances(path, n, heads, bs) and uneven:
            reached.add(PATH_NAMES[path])
    assert {"wgmma-16", "wgmma-32", "wgmma-64"} <= reached, reached


@pytest.mark.parametrize("lengths, uneven", [
    ([1000] * 4, False),
    ([1250, 1000, 1000, 750], False),      # longest exactly 5/4 of the mean: not over it
    ([1251, 1000, 1000, 749], True),
    ([60000, 500, 500, 500], True),
    ([7], False),                          # one request is its own mean
    ([0, 0], False),
])
def test_lengths_uneven_takes_the_batch_layout_over_five_quarters_of_the_mean(lib, lengths, uneven):
    assert lengths_uneven(lengths, lib=lib) == uneven


@pytest.mark.parametrize("lengths", [[], [5, -1, 5], [1 << 32], [1.5]])
def test_lengths_uneven_refuses_bad_lengths(lib, lengths):
    with pytest.raises(ValueError, match="lengths_uneven: lengths must be"):
        lengths_uneven(lengths, lib=lib)


@pytest.mark.parametrize("total, longest, bs", [(10, 5, 0), (10, -1, 2), (4, 5, 2), (1 << 40, 1 << 32, 2)])
def test_the_library_refuses_bad_batch_lengths(lib, total, longest, bs):
    assert lib.kdtree_lengths_uneven(total, longest, bs) == 2
