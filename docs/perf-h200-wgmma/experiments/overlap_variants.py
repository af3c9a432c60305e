"""Patch 47's switched builds as kernel candidates (``--kernel FILE:NAME``), so the parity
tests and kdgate.sanitize_run can hold each to the rules before it is timed further."""

from kdgate.shipped_builds import build_with

copies_after_pv = build_with(("KDTREE_OVERLAP_COPIES_AFTER_PV",))
qk_after_swap = build_with(("KDTREE_OVERLAP_QK_AFTER_SWAP",))
