"""Reduction kernels on the GPU: a reductions.ReductionSpec as cupy kernels.

Beside gpu.py (which calls reduction_launch or row_launch), as
cpu_reductions.py is beside cpu.py. A spec of one pass and one fold runs as one
cupy.ReductionKernel: the pass becomes map_expr (a device function of the elementwise
work on each element, returning the value folded), its fold reduce_expr and identity,
the work on the row post_map_expr (a device function assigning the outputs); cupy
adds each row in its own order (threads of a block, then a tree), not numpy's. Any
other spec (a softmax's passes, a loss's label pick) runs as a row kernel: a
cupy.ElementwiseKernel of raw params, one thread a row, running the spec's passes
over the row as the CPU's loops do; its sums over all rows (a loss's mean) are a
ReductionKernel after it, whose post_map runs the statements on them.

    print(reduction_source(spec)); y, = reduction_launch(spec)(x, t)  # one_fold(spec)
"""
from __future__ import annotations

import functools
import re

import numpy as np

from dezero.kernels.codegen import Param
from dezero.kernels.reductions import ReductionSpec
from dezero.static.sizes import c_text, count, evaluator

# Infinity as cupy's headers (cupy/math_constants.h) spell it: NVRTC has no INFINITY.
_IDENTITY = {"sum": "0", "max": "-{inf}", "min": "{inf}"}
_INFINITY = {"float": "CUDART_INF_F", "double": "CUDART_INF"}
# NaN wins max and min, as in numpy (and in the CPU kernels): a NaN either side wins.
# pick: b is already "the row's label == _r ? the value : a" (a row kernel's fold).
_REDUCE = {"sum": "{a} + {b}", "max": "({b} > {a} || {b} != {b}) ? {b} : {a}",
           "min": "({b} < {a} || {b} != {b}) ? {b} : {a}", "pick": "{b}"}


def one_fold(spec) -> bool:
    """Whether a spec runs as one ReductionKernel (else as a row kernel): one pass
    folding one sum, max or min, with no labels and nothing after all rows (and of
    symbolic sizes, storing no full values: their places are numbers in its map)."""
    (_, folds, _), *more = spec.passes
    stores = "full" in spec.levels[len(spec.inputs):]  # at places its map computes (sizes)
    return not more and len(folds) == 1 and folds[0][0] != "pick" and not spec.totals \
        and "label" not in spec.levels and not (spec.sizes and stores)


def reduction_params(spec) -> dict:
    """The arguments of cupy.ReductionKernel for a reduction spec of one pass and one
    fold (one_fold; a row kernel's totals too): the pass's statements are the
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
            "reduce_expr": _REDUCE[kind].format(a="a", b="b"),
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
    """The kernel as cupy receives it, readable: its arguments, then the preamble (a
    row kernel's: its params and operation, then its totals' ReductionKernel)."""
    if not one_fold(spec):
        return row_source(spec)
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
    drop = tuple(0 if d in spec.axes else slice(None) for d in range(len(spec.shape)))
    # A row value has the reduced axes as 1 (then dropped from a view) or not at all
    # (a (B, T) mask of a sum of (B, T, V) over its last axis).
    with_ones = [spec.inputs[k].shape == ones for k in rows]
    scalar = (0,) if "cub_off" in args["in_params"] else ()
    stored = [level == "full" for level in spec.levels[n_in:]]
    shapes_at = functools.lru_cache(maxsize=64)(evaluator(
        (tuple(spec.shape), ones, tuple(n for d, n in enumerate(spec.shape)
                                        if d not in spec.axes),
         tuple(p.shape for p in spec.outputs)), spec.sizes))

    def launch(*arrays, sizes=()):
        shape, ones, kept, out_shapes = shapes_at(tuple(sizes))
        arrays = [arrays[i] for i in spec.sources]  # in spec.inputs' order
        outs = [cupy.empty(shape if s else kept, p.dtype)
                for p, s in zip(spec.outputs, stored)]
        row_args = [cupy.broadcast_to(arrays[k], ones)[drop] if fits else
                    cupy.broadcast_to(arrays[k], kept) for k, fits in zip(rows, with_ones)]
        kernel(*(arrays[k] for k in full), *scalar, *(o for o, s in zip(outs, stored) if not s),
               *row_args, *(o for o, s in zip(outs, stored) if s), axis=spec.axes)
        return tuple(o.reshape(out) for o, out in zip(outs, out_shapes))
    return launch


# =============================================================================
# Row kernels: row_params, totals_spec, row_source, row_launch
# =============================================================================


def _layout(spec) -> tuple:
    """(rows K, elements a row R, the axes kept axes first, the kept axes' shape)."""
    shape, axes = spec.shape, spec.axes
    kept = [d for d in range(len(shape)) if d not in axes]
    return (count([shape[d] for d in kept]), count([shape[d] for d in axes]),
            kept + list(axes), tuple(shape[d] for d in kept))


def row_params(spec) -> tuple[str, str, str]:
    """(in_params, out_params, operation) of a row kernel's cupy.ElementwiseKernel,
    launched with size= its rows, so that i is the row: every param is raw, named
    `_r_` and the name the statements read, which the operation reads (a full-level
    array, viewed kept axes first, at _k * _R + _r; a row-level one or the labels, of
    the kept axes' shape, at _k; a 0-d one at 0) and writes so; then the rows _keep<m>
    where a pass keeps full values for the next (a softmax's exp, computed once), the
    row values that the totals kernel sums (_t<m>), and _bad, set to 1 by a row
    whose label is out of range; the values of its symbolic sizes are scalar params
    after the inputs (_n_B ...)."""
    _, width, _, _ = _layout(spec)
    n_in, ctype = len(spec.inputs), spec.outputs[0].ctype
    once = [p.shape == () or level == "total" for p, level in zip(spec.inputs, spec.levels)]
    outs = list(zip(spec.outputs, spec.levels[n_in:]))
    labels = [p.name for p, level in zip(spec.inputs, spec.levels) if level == "label"]
    lines = [spec.comment + f" (a row kernel: one thread a row of {width})",
             "const ptrdiff_t _k = i;", f"const ptrdiff_t _R = {c_text(width, _scalar)};"]
    lines += [f"const {p.ctype} {p.name} = _r_{p.name}[{'0' if o else '_k'}];"
              for p, level, o in zip(spec.inputs, spec.levels, once) if o or level != "full"]
    lines += [f"if ({t} < 0 || {t} >= _R) _r__bad[0] = 1;" for t in labels]
    lines += [f"{ctype}* const _keep{m} = &_r__keep{m}[_k * _R];" for m in range(spec.kept)]
    lines += [f"{ctype} {p.name};" for p, level in outs if level == "row"]
    lines += list(spec.setup)
    for stores, (element, folds, after) in zip(spec.stores, spec.passes, strict=True):
        lines += [f"{ctype} {a} = {_IDENTITY.get(kind, '0').format(inf=_INFINITY[ctype])};"
                  for kind, a, _ in folds]
        stored = [p for p in spec.outputs if p.name in stores]
        lines.append("for (ptrdiff_t _r = 0; _r < _R; ++_r) {")
        used = "\n".join([*element, *(v for _, _, v in folds)])  # the inputs this pass reads
        lines += [f"  const {p.ctype} {p.name} = _r_{p.name}[_k * _R + _r];"
                  for p, level, o in zip(spec.inputs, spec.levels, once)
                  if level == "full" and not o and re.search(rf"\b{p.name}\b", used)]
        lines += [f"  {ctype} {p.name};" for p in stored]
        lines += [f"  {line}" for line in element]
        lines += [f"  {a} = {_REDUCE[kind].format(a=a, b=v)};" for kind, a, v in folds]
        lines += [f"  _r_{p.name}[_k * _R + _r] = {p.name};" for p in stored] + ["}"]
        lines += list(after)
    lines += [f"_r__t{m}[_k] = {v};" for m, (_, v) in enumerate(spec.totals)]
    lines += [f"_r_{p.name}[_k] = {p.name};" for p, level in outs if level == "row"]
    dtype = spec.outputs[0].dtype
    out_params = [f"raw {p.dtype} _r_{p.name}" for p, level in outs if level != "total"]
    out_params += [f"raw {dtype} _r__keep{m}" for m in range(spec.kept)]
    out_params += [f"raw {dtype} _r__t{m}" for m in range(len(spec.totals))]
    out_params += ["raw int32 _r__bad"] if labels else []
    return (", ".join([f"raw {p.dtype} _r_{p.name}" for p in spec.inputs] +
                      [f"int64 {_scalar(n)}" for n in spec.sizes]),
            ", ".join(out_params), "\n".join(lines) + "\n")


def _scalar(name: str) -> str:
    """The scalar parameter of a row kernel that holds the size `name` (spec.sizes)."""
    return f"_n_{name}"


def totals_spec(spec):
    """The ReductionSpec of a row kernel's totals (one sum over all rows, passes.
    gpu_misfit allows no more): a one-pass sum over the (K,) row values _t0, whose
    row statements are the spec's `finish`, reading its total-level inputs (0-d)."""
    rows, _, _, _ = _layout(spec)
    (acc, _), = spec.totals
    n_in, ctype = len(spec.inputs), spec.outputs[0].ctype
    values = Param("_t0", ctype, spec.outputs[0].dtype, (rows,))
    inputs = [p for p, level in zip(spec.inputs, spec.levels) if level == "total"]
    outputs = [p for p, level in zip(spec.outputs, spec.levels[n_in:]) if level == "total"]
    return ReductionSpec(
        f"{spec.name}_total", (values, *inputs), tuple(range(len(inputs) + 1)),
        tuple(outputs), ("full",) + ("row",) * (len(inputs) + len(outputs)), (rows,), (0,),
        (), (((), (("sum", acc, "_t0"),), spec.finish),), False,
        f"// kernel {spec.name}_total: the sum over the rows of kernel {spec.name}, then "
        f"the work on it", stores=((),), sizes=spec.sizes)


def row_source(spec) -> str:
    """A row kernel as cupy receives it, readable, with its totals kernel's."""
    in_params, out_params, operation = row_params(spec)
    return (f"// kernel {spec.name}: cupy.ElementwiseKernel, one thread a row of shape "
            f"{spec.shape} over axes {spec.axes}\n// in_params:  {in_params}\n"
            f"// out_params: {out_params}\n{operation.rstrip()}\n" +
            ("\n" + reduction_source(totals_spec(spec)) if spec.totals else ""))


def row_launch(spec, elementwise_kernel):
    """kernel(*inputs) of a row kernel (see row_params), made by gpu.py's
    elementwise_kernel: views of the inputs, fresh outputs (those of the full shape
    laid out kept axes first, returned as views in the spec's shape), one launch of
    one thread a row, then the totals kernel; a label out of range raises IndexError,
    as the forward does (which syncs once)."""
    import cupy
    rows, width, order, kept = _layout(spec)
    kernel = elementwise_kernel(*row_params(spec), spec.name)
    total = reduction_launch(totals_spec(spec)) if spec.totals else None
    n_in, shape = len(spec.inputs), spec.shape
    back = tuple(int(d) for d in np.argsort(order))
    ones = tuple(1 if d in spec.axes else n for d, n in enumerate(shape))
    drop = tuple(0 if d in spec.axes else slice(None) for d in range(len(shape)))
    labels = "label" in spec.levels
    row_values = [p.shape == ones for p in spec.inputs]  # (else of the kept axes alone)
    shapes_at = functools.lru_cache(maxsize=64)(evaluator(
        (rows, width, tuple(shape), tuple(shape[d] for d in order), kept, ones,
         tuple(p.shape for p in spec.outputs)), spec.sizes))

    def view(x, p, level, row_value, shape, kept, ones):
        if p.shape == () or level == "total":
            return x
        if level == "full":
            return cupy.broadcast_to(x, shape).transpose(order)
        return cupy.broadcast_to(x, ones)[drop] if row_value else cupy.broadcast_to(x, kept)

    def launch(*arrays, sizes=()):
        rows, width, shape, moved, kept, ones, out_shapes = shapes_at(tuple(sizes))
        arrays = [arrays[i] for i in spec.sources]
        outs = [cupy.empty(moved if level == "full" else kept, p.dtype)
                for p, level in zip(spec.outputs, spec.levels[n_in:]) if level != "total"]
        dtype = spec.outputs[0].dtype
        scratch = [cupy.empty(rows * width, dtype) for _ in range(spec.kept)]
        scratch += [cupy.empty(rows, dtype) for _ in spec.totals]
        bad = (cupy.zeros(1, np.int32),) if labels else ()
        kernel(*(view(x, p, level, r, shape, kept, ones) for x, p, level, r in
                 zip(arrays, spec.inputs, spec.levels, row_values)), *sizes,
               *outs, *scratch, *bad, size=rows)
        if labels and int(bad[0][0]):
            raise IndexError(f"kernel {spec.name} ({spec.comment.split(': ', 1)[1]}): a "
                             f"label is out of range; labels are class ids in 0..{width - 1}")
        made = iter(outs)
        totals = iter(total(scratch[-1], *(x for x, level in zip(arrays, spec.levels)
                                           if level == "total"), sizes=sizes) if total else ())
        return tuple(next(totals) if level == "total" else
                     next(made).transpose(back) if level == "full" else
                     next(made).reshape(out)
                     for out, level in zip(out_shapes, spec.levels[n_in:]))
    return launch
