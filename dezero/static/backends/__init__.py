"""Backends run a StaticGraph: compile(graph, backend) -> a callable plan.

backends/ is the last stage of the pipeline (tracer -> ir -> passes -> backends).
Each backend is a module with `compile_graph(graph) -> plan`; a plan (lowering.Plan)
replays the graph with `plan(*inputs)` or `plan.run(inputs)`, reading and writing
the captured state. BACKENDS names them:

    interpreter   interpreter.py walks the nodes one by one and checks every type:
                  the reference every other backend is tested against
    python        pycode.py turns the node list into Python source that calls each
                  op's forward on arrays directly
    cpu           dezero/kernels/cpu.py: the python backend's code with each fused group run as a
                  C++ kernel, compiled with the system compiler and cached on disk
                  (the default on the CPU; with no compiler it warns once and runs
                  unfused)
    cupy          dezero/kernels/gpu.py: the same replay code with each fused group one
                  cupy.ElementwiseKernel, or ReductionKernel (the default for graphs
                  on the GPU)

DEZERO_BACKEND=<name> sets the default on the CPU: interpreter, python or cpu (the
test suite sets python unless told otherwise; DEZERO_BACKEND=cpu runs it with fused
kernels); graphs on the GPU replay with cupy whatever it says.

    plan = compile(graph, "interpreter"); plan(x)   # or graph.compile("interpreter")
"""
from __future__ import annotations

import importlib
import os

# backend name -> the module that defines compile_graph(graph).
BACKENDS = {
    "interpreter": "dezero.static.backends.interpreter",
    "python": "dezero.static.backends.pycode",
    "cpu": "dezero.kernels.cpu",
    "cupy": "dezero.kernels.gpu",
}

DEFAULT = os.environ.get("DEZERO_BACKEND") or "cpu"


def default_backend(graph) -> str:
    """The backend a graph replays with unless one is named, by where its arrays are."""
    if graph.device == "gpu":
        return "cupy"
    if DEFAULT not in BACKENDS or DEFAULT == "cupy":
        from dezero import cuda
        raise ValueError(
            f"DEZERO_BACKEND={DEFAULT!r} cannot replay graph {graph.name}, which is on the "
            f"CPU: it takes interpreter, python or cpu (graphs on the GPU replay with cupy "
            f"kernels{'' if cuda.gpu_enable else '; ' + cuda.no_gpu_reason})\n  fix: unset "
            f"DEZERO_BACKEND, or set it to one of those")
    return DEFAULT


def compile(graph, backend: str | None = None):  # noqa: A001 - the pipeline's word for it
    """A plan that replays `graph` with the named backend (default_backend if None)."""
    backend = backend or default_backend(graph)
    module = BACKENDS.get(backend)
    if module is None:
        raise ValueError(f"unknown backend {backend!r} for graph {graph.name}; "
                         f"choose one of {', '.join(sorted(BACKENDS))}")
    return importlib.import_module(module).compile_graph(graph)
