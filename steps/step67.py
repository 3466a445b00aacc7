"""Step 67: the C++ kernel -- generated source, compiled, timed against numpy.

The kernel spec of a fused group (step 66) holds a C++ body for ONE element.
The "cpu" backend (dezero/kernels/cpu.py, the default replay backend
on the CPU) wraps that body in a loop over the array -- inputs that broadcast
(a bias row, a scalar) are read through strides, the loop is written so the
compiler vectorises it (math functions from its SIMD library), and OpenMP
splits large arrays across cores; the loops are a macro of the header
dezero_kernels.h, so a kernel's source is its body once -- then compiles all kernels of a graph with
the system C++ compiler into one shared library, loaded with ctypes and
cached on disk ($DEZERO_CACHE_DIR, by a hash of the source). numpy runs a
chain of ten ops as ten loops, each writing a temporary array; the kernel
runs one loop and writes one array.
Run: python steps/step67.py
"""
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero.kernels import cpu
from dezero.kernels.codegen import kernel_spec


def chain(x, a, b):
    return F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2


def chain_numpy(x, a, b):
    return np.tanh(x * a + b) * (1 / (1 + np.exp(-x))) + x ** 2


rng = np.random.default_rng(0)
x = rng.standard_normal((1000, 1000)).astype(np.float32)
a = rng.standard_normal(1000).astype(np.float32)   # a row, broadcast over x's rows
b = np.array(0.5, np.float32)                      # a scalar

graph = dezero.trace(chain).lower(x, a, b)
spec = kernel_spec(graph.groups[0])
print(f"the body for one element (kernel {spec.name}, {len(graph.groups[0].nodes)} ops):")
print(spec.body)
source = cpu.kernel_source(spec)
print(f"the kernel the cpu backend writes around it ({len(source.splitlines())} lines):")
print(source)

missing = cpu.missing_reason()
if missing is not None:
    print(f"skipped compiling and timing: {missing}")
    sys.exit(0)

library = cpu.library_source([spec])   # #include "dezero_kernels.h" + the kernels
with tempfile.TemporaryDirectory() as scratch:
    # An empty cache, to see the compiler at work (replays use $DEZERO_CACHE_DIR).
    user_cache, os.environ["DEZERO_CACHE_DIR"] = os.environ.get("DEZERO_CACHE_DIR"), scratch
    try:
        start = time.perf_counter()
        path = cpu.build_library(library)
        built = time.perf_counter() - start
        start = time.perf_counter()
        cpu.build_library(library)      # the same source again: found in the cache
        cached = time.perf_counter() - start
    finally:
        if user_cache is None:
            del os.environ["DEZERO_CACHE_DIR"]
        else:
            os.environ["DEZERO_CACHE_DIR"] = user_cache
print(f"compiled with {cpu.compiler()[1]}\n  flags: {' '.join(cpu.FLAGS)}")
print(f"library {path.name}: compiled in {built:.2f} s, found in the cache again in "
      f"{cached * 1e3:.2f} ms")

traced = dezero.trace(chain)
traced(x, a, b)                        # records
unfused = traced.graph.compile("python")   # replay plans: every node a numpy call,
fused = traced.graph.compile("cpu").wait()  # or the group as this compiled kernel
#                                            (a library not in the cache compiles in the
#                                            background; wait() waits for it)
fused_y, numpy_y = fused(x, a, b).data, chain_numpy(x, a, b)
print(f"fused kernel equals numpy: {np.allclose(fused_y, numpy_y, rtol=1e-5, atol=1e-5)}")


def per_call(fn, calls=10):
    fn(x, a, b)
    start = time.perf_counter()
    for _ in range(calls):
        fn(x, a, b)
    return (time.perf_counter() - start) / calls


timings = {"numpy": per_call(chain_numpy), "dezero eager": per_call(chain),
           "replay unfused (python)": per_call(unfused), "replay fused (cpu)": per_call(fused)}
print(f"{x.size} float32 elements, ms per call:")
for name, seconds in timings.items():
    print(f"  {name:24s} {seconds * 1e3:7.2f}")
print(f"fused kernel is {timings['numpy'] / timings['replay fused (cpu)']:.1f}x as fast "
      f"as numpy")
