"""kdgate: the gate's library (parity rule, allocator churn, coverage checking, ...).

The shipped kernel and patch live in ``kdtree``; kdgate may import kdtree, never the
other way round.
"""
