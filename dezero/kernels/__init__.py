"""dezero.kernels: the kernel compiler, fused groups as generated C++ and CUDA.

static/ records a run, optimises the graph and groups elementwise work into kernels
(passes.fuse); it replays without this package, each group as numpy statements.
This package makes those groups real kernels, from one body for both devices:

    codegen.py         a group -> a kernel spec: typed params and a C++ body
    reductions.py      a group with reductions -> a ReductionSpec: passes over each row
    cpu.py             the "cpu" backend: every spec of a graph in one C++ library,
                       compiled with the system compiler, loaded with ctypes
    cpu_reductions.py  a ReductionSpec as C++ loops (numpy's pairwise sums)
    dezero_kernels.h   what every library shares: vector math, array layout, the loops
    cache.py           the on-disk library cache, and whom it trusts
    pending.py         compiling on a worker thread while replays run unfused
    measure.py         compiled or numpy, one thread or all: timed, not guessed
    gpu.py             the "cupy" backend: each spec one cupy.ElementwiseKernel
    gpu_reductions.py  a ReductionSpec as one cupy.ReductionKernel

It imports static/ (the IR, the program, the replay code it extends); static/ never
imports it, and reaches its backends by name (static/backends/__init__.py).

    from dezero.kernels.codegen import kernel_spec
    print(kernel_spec(graph.groups[0]).body)       # the C++ of one element
    print(graph.compile("cpu").wait().kernel_source)  # the library's source
"""
