"""The cupy backend: fused kernels as cupy.ElementwiseKernel, other nodes as cupy calls.

kernels/gpu.py is the GPU twin of the C++ backend: the replay code of pycode.py with
a kernel factory that hands each kernel spec (codegen.py: typed params and a C++ body
for one element) to cupy.ElementwiseKernel, which wraps the body in its index loop
and compiles it with NVRTC on first call; a group with a reduction goes to
cupy.ReductionKernel, or to a row kernel of several passes (gpu_reductions.py).
Nodes outside kernels (matmul, other reductions, reshapes) call their forwards on
cupy arrays, as in the python backend. cupy is imported on first use, so dezero
imports with numpy alone.

    plan = graph.to_gpu().compile("cupy"); print(plan.kernel_source)
"""
from __future__ import annotations

import functools

import numpy as np

from dezero.kernels import gpu_reductions, outputs
from dezero.kernels.codegen import check_sizes, kernel_spec
from dezero.static import debugging
from dezero.static.sizes import evaluator

# =============================================================================
# Spec -> ElementwiseKernel arguments: elementwise_params, kernel_source
# =============================================================================


def elementwise_params(spec) -> tuple[str, str, str]:
    """(in_params, out_params, operation) of cupy.ElementwiseKernel for `spec`: the
    parameters typed by their numpy dtype names, the operation the spec's body (whose
    names codegen keeps clear of cupy's loop index `i`). A horizontal kernel's are
    `raw` (see _horizontal_body)."""
    if spec.segments:
        return (", ".join(f"raw {p.dtype} _r_{p.name}" for p in spec.inputs),
                ", ".join(f"raw {p.dtype} _r_{p.name}" for p in spec.outputs),
                _horizontal_body(spec))
    in_params = ", ".join(f"{p.dtype} {p.name}" for p in spec.inputs)
    out_params = ", ".join(f"{p.dtype} {p.name}" for p in spec.outputs)
    return in_params, out_params, spec.body


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _horizontal_body(spec) -> str:
    """One launch over every segment's elements, one after the other: the index i
    picks the segment, and its body runs on element i - (the segment's start) of the
    raw arrays it reads (element 0 of those of one element) and writes."""
    lines, start = [f"// kernel {spec.name}: horizontal, {len(spec.segments)} segments "
                    f"in one launch"], 0
    for j, part in enumerate(spec.segments):
        size = _size(part.shape)
        lines.append(f"{'else ' if j else ''}if (i < {start + size}) {{  // {part.name}, "
                     f"shape {part.shape}\n  const ptrdiff_t _j = i - {start};")
        for p in dict((p.name, p) for p in part.inputs).values():  # each name once
            at = "_j" if _size(p.shape) == size else "0"
            lines.append(f"  const {p.ctype} {p.name} = _r_{p.name}[{at}];")
        lines.append("  " + " ".join(f"{p.ctype} {p.name};" for p in part.outputs))
        lines += [f"  {line}" for line in part.body.strip().splitlines()[1:]]
        lines += [f"  _r_{p.name}[_j] = {p.name};" for p in part.outputs] + ["}"]
        start += size
    return "\n".join(lines) + "\n"


def kernel_source(spec) -> str:
    """The kernel as cupy receives it, readable: its parameters, then the body."""
    if hasattr(spec, "axes"):
        return gpu_reductions.reduction_source(spec)
    in_params, out_params, body = elementwise_params(spec)
    return (f"// kernel {spec.name}: cupy.ElementwiseKernel, shape {spec.shape}\n"
            f"// in_params:  {in_params}\n// out_params: {out_params}\n{body.rstrip()}\n")


# =============================================================================
# Kernels: elementwise_kernel (memoised), kernel_factory, compile_graph
# =============================================================================


@functools.cache
def elementwise_kernel(in_params: str, out_params: str, body: str, name: str):
    """One cupy.ElementwiseKernel per distinct kernel in the process: cupy compiles
    it per device and argument layout on first call (and caches the binary on disk)."""
    import cupy
    return cupy.ElementwiseKernel(in_params, out_params, body, name, return_tuple=True)


def kernel_factory(spec):
    """The callable of a kernel line of the replay code: the input arrays (cupy, any
    strides, broadcasting to spec.shape) in spec.inputs order -> a tuple of fresh
    output arrays of spec.shape, one per spec.outputs (a horizontal kernel's: each
    of its segment's shape, from one launch); `out` gives, per output, an array to
    write it into instead (where outputs.writable allows) or None; `sizes` the values
    of its symbolic sizes (spec.sizes), a tuple of ints, as the replay code passes them."""
    reduction = hasattr(spec, "axes")
    if reduction:
        kernel = gpu_reductions.reduction_launch(spec) if gpu_reductions.one_fold(spec) \
            else gpu_reductions.row_launch(spec, elementwise_kernel)
    else:
        kernel = elementwise_kernel(*elementwise_params(spec), spec.name)
    if spec.segments:
        kernel = _horizontal_launch(spec, kernel)
    shape_at = evaluator(tuple(spec.shape), spec.sizes)

    def run(*arrays, out=None, sizes=()):
        values = check_sizes(spec, sizes)
        if out:
            import cupy
            # (a queued kernel would change an array another thread took meanwhile)
            given = outputs.writable(out) if outputs.alone() else (None,) * len(out)
            arrays += tuple(cupy.empty(shape_at(values), p.dtype) if o is None else o
                            for o, p in zip(given, spec.outputs))
        launch = functools.partial(kernel, sizes=values) if reduction else kernel
        if debugging.LEVEL >= 2:
            return _timed(spec.name, launch, arrays)
        return launch(*arrays)

    run.__name__ = run.__qualname__ = spec.name
    return run


def _horizontal_launch(spec, kernel):
    """kernel(*inputs) of a horizontal kernel: its outputs are raw, so they are made
    here (each of its segment's shape) and the launch is told its size."""
    import cupy
    outs = [(p.shape, p.dtype) for p in spec.outputs]

    def launch(*arrays):
        return kernel(*arrays, *(cupy.empty(s, d) for s, d in outs), size=spec.shape[0])
    return launch


def _timed(name: str, kernel, arrays):
    # Events on the stream time the kernel itself, not the work queued before it.
    import cupy
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    outputs = kernel(*arrays)
    end.record()
    end.synchronize()
    moved = sum(a.nbytes for a in (*arrays, *outputs))
    debugging.log(2, f"  kernel {name}: {cupy.cuda.get_elapsed_time(start, end):.3f} ms, "
                     f"{moved} bytes in/out")
    return outputs


def compile_graph(graph):
    """The replay code of a graph on the GPU, each of its groups one cupy kernel;
    `plan.kernel_source` shows them all (kernel_source of each spec)."""
    from dezero.static.backends.pycode import Compiled
    if graph.device != "gpu":
        raise ValueError(f"backend 'cupy' replays graphs whose arrays are on the GPU; graph "
                         f"{graph.name} is on the CPU\n  fix: graph.to_gpu() (a traced graph: "
                         f"trace it on cupy arrays, with the model moved by model.to_gpu()), "
                         f"or a CPU backend")
    sources = []

    def factory(group):
        spec = kernel_spec(group)
        sources.append(kernel_source(spec))
        debugging.log(4, f"kernel {group.name} of {graph.name}:\n{sources[-1]}")
        return kernel_factory(spec)

    plan = Compiled(graph, factory)
    plan.kernel_source = "\n".join(sources)
    return plan
