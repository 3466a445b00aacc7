"""Reduction kernels on the GPU: a reductions.ReductionSpec as one cupy.ReductionKernel.

Beside gpu.py (which calls reduction_launch for such a spec), as
cpu_reductions.py is beside cpu.py. The spec's one pass becomes map_expr (a device
function of the elementwise work on each element, returning the value folded), its
fold reduce_expr and identity, the work on the row post_map_expr (a device function
assigning the outputs); passes.gpu_misfit lets only such groups fuse on the GPU.
cupy adds each row in its own order (threads of a block, then a tree), not numpy's.

    print(reduction_source(spec)); y, = reduction_launch(spec)(x, t)
"""
from __future__ import annotations

import functools

import numpy as np

# Infinity as cupy's headers (cupy/math_constants.h) spell it: NVRTC has no INFINITY.
_IDENTITY = {"sum": "0", "max": "-{inf}", "min": "{inf}"}
_INFINITY = {"float": "CUDART_INF_F", "double": "CUDART_INF"}
# NaN wins max and min, as in numpy (and in the CPU kernels): a NaN either side wins.
_REDUCE = {"sum": "a + b", "max": "(b > a || b != b) ? b : a",
           "min": "(b < a || b != b) ? b : a"}


def reduction_params(spec) -> dict:
    """The arguments of cupy.ReductionKernel for a reduction spec of one pass and one
    fold (the groups passes.gpu_misfit lets through): the pass's statements are the
    body of a function `<name>_map` of the full-level inputs, returning the value it
    folds, and the statements after the fold that of `<name>_post`, which assigns the
    row outputs; both go in the preamble. cupy binds input arrays only in its loop
    over the reduced elements and output arrays per row, so row-level inputs travel
    as out_params that post_map reads, and full-level outputs as raw out_params that
    the map writes at the element's position (_flat_index). Params are in0.., out0..,
    row0.., full0.. (cupy's CUB path renames in0 and out0 by text; a macro of cupy's
    names its argument `a`)."""
    (element, ((kind, acc, value),), after), = spec.passes
    ctype = spec.outputs[0].ctype
    n_in = len(spec.inputs)
    full = [p for p, level in zip(spec.inputs, spec.levels) if level == "full"]
    rows = [p for p, level in zip(spec.inputs, spec.levels) if level == "row"]
    outs = [p for p, level in zip(spec.outputs, spec.levels[n_in:]) if level == "row"]
    stored = [p for p, level in zip(spec.outputs, spec.levels[n_in:]) if level == "full"]
    ins = [f"{p.dtype} in{k}" for k, p in enumerate(full)]
    if len(ins) == 1:
        # cupy runs a ReductionKernel of one input and one output through CUB when it
        # can, whose two-pass full reductions apply post_map twice, and orders the
        # reduced axes of one input by its strides: a second (unused) argument keeps
        # it on its own kernel, with the reduced axes in order.
        ins.append("int32 cub_off")
    out_params = [f"{p.dtype} out{k}" for k, p in enumerate(outs)] + \
        [f"{p.dtype} row{k}" for k, p in enumerate(rows)] + \
        [f"raw {p.dtype} full{k}" for k, p in enumerate(stored)]
    map_args = [f"const {p.ctype} {p.name}" for p in full]
    if stored:
        map_args += [f"F{k}& _full{k}" for k in range(len(stored))] + ["const ptrdiff_t _k"]
    post_args = ", ".join([f"const {ctype} {acc}"] + [f"{p.ctype}& {p.name}" for p in outs] +
                          [f"const {p.ctype} {p.name}" for p in rows])
    template = "template <" + ", ".join(f"class F{k}" for k in range(len(stored))) + ">"
    preamble = "\n".join([
        spec.comment, *([template] if stored else []),
        f"__device__ {ctype} {spec.name}_map({', '.join(map_args)}) {{",
        *(f"  {p.ctype} {p.name};" for p in stored), *(f"  {line}" for line in element),
        *(f"  _full{k}[_k] = {p.name};" for k, p in enumerate(stored)),
        f"  return {value};", "}", f"__device__ void {spec.name}_post({post_args}) {{",
        *(f"  {line}" for line in (*spec.setup, *after)), "}"]) + "\n"
    map_call = [f"in{k}" for k in range(len(full))]
    if stored:
        map_call += [f"full{k}" for k in range(len(stored))] + [_flat_index(spec)]
    return {"in_params": ", ".join(ins), "out_params": ", ".join(out_params),
            "map_expr": f"{spec.name}_map({', '.join(map_call)})",
            "reduce_expr": _REDUCE[kind],
            "post_map_expr": f"{spec.name}_post(a, " + ", ".join(
                [f"out{k}" for k in range(len(outs))] +
                [f"row{k}" for k in range(len(rows))]) + ")",
            "identity": _IDENTITY[kind].format(inf=_INFINITY[ctype]), "name": spec.name,
            "reduce_type": ctype, "preamble": preamble}


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _flat_index(spec) -> str:
    """The position in spec.shape (C order) of the element cupy's loop is at, from
    its _J (the reduced axes' position, in C order over them) and _i (the kept
    axes')."""
    shape, axes = spec.shape, spec.axes
    kept = [d for d in range(len(shape)) if d not in axes]
    if tuple(axes) == tuple(range(len(axes))):  # reduced axes first: one product
        return f"(ptrdiff_t)_J * {_size([shape[d] for d in kept])} + _i"
    terms = []
    for index, dims in (("_J", axes), ("_i", kept)):
        inner = 1
        for d in reversed(dims):
            terms.append(f"(ptrdiff_t){index} / {inner} % {shape[d]} * {_size(shape[d + 1:])}")
            inner *= shape[d]
    return " + ".join(terms)


def reduction_source(spec) -> str:
    """The kernel as cupy receives it, readable: its arguments, then the preamble."""
    args = reduction_params(spec)
    return (f"// kernel {spec.name}: cupy.ReductionKernel, shape {spec.shape}, axes "
            f"{spec.axes}\n" + "".join(f"// {key + ':':14} {args[key]}\n" for key in (
                "in_params", "out_params", "map_expr", "reduce_expr", "post_map_expr",
                "identity")) + args["preamble"])


@functools.cache
def reduction_kernel(args: tuple):
    """One cupy.ReductionKernel per distinct kernel in the process (args: the items
    of reduction_params)."""
    import cupy
    return cupy.ReductionKernel(**dict(args))


def reduction_launch(spec):
    """kernel(*inputs) of a reduction spec, on the group's inputs (spec.sources puts
    them in spec.inputs' order): it passes the full-level inputs as they are (cupy
    broadcasts them to spec.shape), outputs made here of the kept axes' shape, each
    row-level input as a view of that shape and the full-level outputs, made here,
    and returns the outputs in their own shapes."""
    import cupy
    args = reduction_params(spec)
    kernel = reduction_kernel(tuple(args.items()))
    n_in = len(spec.inputs)
    full = [k for k, level in enumerate(spec.levels[:n_in]) if level == "full"]
    rows = [k for k, level in enumerate(spec.levels[:n_in]) if level == "row"]
    ones = tuple(1 if d in spec.axes else n for d, n in enumerate(spec.shape))
    kept = tuple(n for d, n in enumerate(spec.shape) if d not in spec.axes)
    drop = tuple(0 if d in spec.axes else slice(None) for d in range(len(spec.shape)))
    # A row value has the reduced axes as 1 (then dropped from a view) or not at all.
    with_ones = [len(spec.inputs[k].shape) <= len(ones) and
                 np.broadcast_shapes(spec.inputs[k].shape, ones) == ones for k in rows]
    scalar = (0,) if "cub_off" in args["in_params"] else ()
    stored = [level == "full" for level in spec.levels[n_in:]]

    def launch(*arrays):
        arrays = [arrays[i] for i in spec.sources]  # in spec.inputs' order
        outs = [cupy.empty(spec.shape if s else kept, p.dtype)
                for p, s in zip(spec.outputs, stored)]
        row_args = [cupy.broadcast_to(arrays[k], ones)[drop] if fits else
                    cupy.broadcast_to(arrays[k], kept) for k, fits in zip(rows, with_ones)]
        kernel(*(arrays[k] for k in full), *scalar, *(o for o, s in zip(outs, stored) if not s),
               *row_args, *(o for o, s in zip(outs, stored) if s), axis=spec.axes)
        return tuple(o.reshape(p.shape) for o, p in zip(outs, spec.outputs))
    return launch
