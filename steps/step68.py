"""Step 68: the GPU kernel -- the same body as a cupy ElementwiseKernel.

A kernel spec (dezero.kernels.codegen) holds typed parameters and a C++ body
for ONE element. That is exactly what `cupy.ElementwiseKernel(in_params,
out_params, operation, name)` takes: cupy writes the index loop around the
body (broadcasting its inputs by strides) and compiles it for the GPU with
NVRTC on first call. So the CPU and the GPU compile one body, made from each
op's `cpp` expression: `tanh`, `exp` and the other math functions have the
same names in C++ and CUDA. A graph traced on cupy arrays replays with the
"cupy" backend: one kernel per fused group, cupy calls for the rest. Where
cupy finds a GPU this step runs the fused chain there and times it; elsewhere
it prints the kernel source and says what it skipped.
Run: python steps/step68.py
"""
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero.kernels import gpu
from dezero.kernels.codegen import kernel_spec


def chain(x, a, b):
    return F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2


rng = np.random.default_rng(0)
x = rng.standard_normal((1000, 1000)).astype(np.float32)
a = rng.standard_normal(1000).astype(np.float32)   # a row, broadcast over x's rows
b = np.array(0.5, np.float32)                      # a scalar

# The spec does not depend on the device: lower the graph on small numpy arrays.
graph = dezero.trace(chain).lower(x[:4], a, b)
print(graph)
spec = kernel_spec(graph.groups[0])
print("the kernel as cupy.ElementwiseKernel receives it (the body is its `operation`):")
print(gpu.kernel_source(spec))

if not dezero.cuda.gpu_enable:
    print(f"GPU: skipped compiling and running the kernel: {dezero.cuda.no_gpu_reason}")
else:
    cp = dezero.cuda.cupy
    xg, ag, bg = cp.asarray(x), cp.asarray(a), cp.asarray(b)
    traced = dezero.trace(chain)
    traced(xg, ag, bg)           # records on the GPU; the graph replays with "cupy"
    fused = traced(xg, ag, bg)   # the first replay compiles the kernel
    expected = chain(x, a, b).data
    same = np.allclose(cp.asnumpy(fused.data), expected, rtol=1e-5, atol=1e-5)
    print(f"GPU: fused replay equals numpy eager: {same}")

    def per_call(fn, calls=50):
        fn(xg, ag, bg)
        cp.cuda.Device().synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn(xg, ag, bg)
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - start) / calls

    eager_s, fused_s = per_call(chain), per_call(traced)
    print(f"GPU, {x.size} elements: eager cupy {eager_s * 1e3:.3f} ms, "
          f"fused kernel {fused_s * 1e3:.3f} ms ({eager_s / fused_s:.1f}x)")
