"""Driver for an ncu profile of the layer loop's case (session 23): bs1 ctx1k N8 H8, 61
layers each on its own inputs, launched eagerly (ncu serialises kernels): three passes of 61
calls, so `--launch-skip 130 --launch-count 1 -k regex:verify_rows` profiles a main kernel of
the third pass. Run on the GPU host from the repository root under ncu, with
PYTHONPATH=$PWD:$PWD/kernels (see sass_profile.py for the whole recipe)."""
import torch

from kdgate.perf_inputs import build_perf_inputs
from kdgate.perf_matrix import PerfCase
from kdtree import verify_op

layers = [build_perf_inputs(PerfCase(1, 1024, 8, 8, "tree"), "cuda", seed=k) for k in range(61)]
outs = [x.new_output() for x in layers]
for rep in range(3):
    for x, o in zip(layers, outs):
        args, kwargs = x.call_args(o)
        verify_op.launch_build((), *args, **kwargs)
    torch.cuda.synchronize()
print("done", flush=True)
