"""Reduction kernels on the CPU: a reductions.ReductionSpec as C++ loops.

Beside cpu.py, which compiles these functions into its libraries
with the elementwise kernels and calls them through reduction_call. Each row (a
position of the kept axes) runs on one thread: its passes loop over the reduced
axes; sums over the innermost axes are added in numpy's pairwise order (the
header's pairwise_sum), so that they equal numpy's to the bit where numpy's inner
loop runs along them (C-contiguous arrays), and other sums row after row, as
numpy adds them.

    source = reduction_source(spec); run = reduction_call(spec, compiled_function)
"""
from __future__ import annotations

import operator

import numpy as np

from dezero.kernels.codegen import per_sizes, size_array
from dezero.static.sizes import count, evaluator


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


_FOLDS = {"sum": "{a} += {v};", "max": "{a} = ({v} > {a} || {v} != {v}) ? {v} : {a};",
          "min": "{a} = ({v} < {a} || {v} != {v}) ? {v} : {a};",
          "pick": "{a} = {v};"}  # v: the row's label == _r ? the value : a
_START = {"sum": "0", "max": "-INFINITY", "min": "INFINITY", "pick": "0"}  # NaN wins max, min


def once(spec, j: int) -> bool:
    """Whether input j is read once, before the loops: a scalar, or read by the
    statements on the totals."""
    return spec.inputs[j].shape == () or spec.levels[j] == "total"


def columns(spec) -> bool:
    """Whether a kernel runs by columns: one pass with nothing before it, and kept
    axes inside reduced ones (a bias's gradient, summed over the batch; the sum of its
    squares over all rows, a gradient norm's, as totals after them). Its loop over
    the reduced positions is then the outer one, over blocks of kept positions that
    the inner loop runs through at unit stride, as numpy does; full outputs are laid
    out reduced axes first."""
    return not spec.pairwise and len(spec.passes) == 1 and not spec.setup and \
        "label" not in spec.levels


def _broadcasts(shape, target) -> bool:
    # numpy's rule without its ValueError: a (B, T) mask of a sum of (B, T, V) over
    # its last axis does not broadcast to (B, T, 1).
    return len(shape) <= len(target) and all(
        a in (1, b) for a, b in zip(reversed(shape), reversed(target)))


def layouts(spec) -> list:
    """Per input, how a reduction kernel reads it: (shape, order, kept), the shape it
    broadcasts to, its axes in the order the kernel walks them, and how many of them
    (the first) are the rows: the kernel's shape, the kept axes then the reduced ones
    (a full input); that shape with 1 on the reduced axes, or the kept axes alone where
    the input does not broadcast so (a row's values, labels); its own shape (an input
    read once)."""
    shape, axes = tuple(spec.shape), spec.axes
    order = [d for d in range(len(shape)) if d not in axes] + list(axes)
    kept, ones = len(order) - len(axes), tuple(1 if d in axes else n for d, n in enumerate(shape))
    found = []
    for j, (p, level) in enumerate(zip(spec.inputs, spec.levels)):
        if once(spec, j):
            found.append((tuple(p.shape), list(range(len(p.shape))), len(p.shape)))
        elif level == "full" or _broadcasts(p.shape, ones):
            found.append((shape if level == "full" else ones, order, kept))
        else:  # the kept axes alone
            found.append((tuple(shape[d] for d in order[:kept]), list(range(kept)), kept))
    return found


def reduction_source(spec, spell=str, sizes_param="") -> str:
    """The C++ of a reduction kernel (codegen.ReductionSpec): each input is read as K
    rows of the kept axes by R positions of the reduced ones (layouts: the header's
    rows_layout finds its two strides, or refuses an input that reduction_call then
    lays out), the outputs are C-contiguous arrays of K x R (full), K (rows) or 1
    (totals) elements; rows run on OpenMP's threads. It returns -3 for a label out
    of range. spell(size) writes a size (cpu.spelled: symbolic ones from the array _S,
    which sizes_param declares)."""
    ins, outs, n_in = spec.inputs, spec.outputs, len(spec.inputs)
    ctype = outs[0].ctype
    rows = count([n for d, n in enumerate(spec.shape) if d not in spec.axes])
    width = count([spec.shape[d] for d in spec.axes])
    fixed = "static " if not spec.sizes else ""  # sizes known when it is compiled
    params = ", ".join(f"Object* _a{k}" for k in range(n_in + len(outs)))
    lines = ["", spec.comment, "// " + ", ".join(
        f"{p.name}: {p.dtype}{list(p.shape)} ({level})" for p, level in zip(ins + outs,
                                                                         spec.levels)),
        f"// over shape {list(spec.shape)}, reducing axes {list(spec.axes)}",
        f'extern "C" int {spec.name}({params}, {sizes_param}int _threads) {{',
        f"  {'const' if spec.sizes else 'constexpr'} npy_intp _K = {spell(rows)}, "
        f"_R = {spell(width)};"]
    for j, (p, (shape, order, kept)) in enumerate(zip(ins, layouts(spec))):
        lines += [f"  {fixed}const npy_intp _t{j}[] = {{{', '.join(map(spell, shape)) or 1}}};",
                  f"  static const int _o{j}[] = {{{', '.join(map(str, order)) or 0}}};",
                  f"  npy_intp _k{j}, _r{j};",
                  f"  if (!rows_layout(_a{j}, {np.dtype(p.dtype).num}, sizeof({p.ctype}), "
                  f"{len(shape)}, _t{j}, _o{j}, {kept}, &_k{j}, &_r{j})) return {j + 1};"]
    for j, p in enumerate(ins + outs):
        const, t = "const " if j < n_in else "", p.ctype
        lines.append(f"  {const}{t}* const _p{j} = ({const}{t}*)((Array*)_a{j})->data;")
    lines += [f"  const {p.ctype} {p.name} = _p{j}[0];" for j, p in enumerate(ins)
              if once(spec, j)]
    lines += [f"  std::vector<{ctype}> _tot{m}(_K);" for m in range(len(spec.totals))]
    if columns(spec):
        return "\n".join(lines + _column_loops(spec, ctype) + _finish(spec, ctype))
    buffers = max([sum(kind == "sum" for kind, _, _ in folds) for _, folds, _ in spec.passes]
                  + [0]) if spec.pairwise else 0
    labels = [p.name for p, level in zip(ins, spec.levels) if level == "label"]
    lines += ["  int _bad = 0;  // a label out of range"] if labels else []
    lines += ["  _Pragma(\"omp parallel num_threads(_threads) if (_threads > 1 && _K > 1 && "
              "threads_ok)\")",
              "  {", *(f"  std::vector<{ctype}> _buf{m}(_R);" for m in range(buffers)),
              *(f"  std::vector<{ctype}> _keep{m}(_R);" for m in range(spec.kept)),
              "  _Pragma(\"omp for\")", "  for (npy_intp _k = 0; _k < _K; ++_k) {"]
    lines += [f"    const {p.ctype} {p.name} = _p{j}[_k * _k{j}];" for j, p in enumerate(ins)
              if spec.levels[j] in ("row", "label") and not once(spec, j)]
    for t in labels:
        lines += [f"    if ({t} < 0 || {t} >= _R) {{", "      _Pragma(\"omp atomic write\")",
                  "      _bad = -3;", "    }"]
    lines += [f"    {ctype} {p.name};" for j, p in enumerate(outs)
              if spec.levels[n_in + j] == "row"]
    lines += [f"    {line}" for line in spec.setup]
    for stores, (element, folds, after) in zip(spec.stores, spec.passes, strict=True):
        lines += [f"    {ctype} {a} = {_START[kind]};" for kind, a, _ in folds]
        lines.append("    for (npy_intp _r = 0; _r < _R; ++_r) {")
        lines += [f"      const {ctype} {p.name} = _p{j}[_k * _k{j} + _r * _r{j}];"
                  for j, p in enumerate(ins) if spec.levels[j] == "full" and not once(spec, j)]
        stored = [(j, p) for j, p in enumerate(outs) if p.name in stores]
        lines += [f"      {ctype} {p.name};" for _, p in stored]
        lines += [f"      {line}" for line in element]
        m = 0
        for kind, a, v in folds:
            if kind == "sum" and spec.pairwise:
                lines.append(f"      _buf{m}[_r] = {v};")
                m += 1
            else:
                lines.append("      " + _FOLDS[kind].format(a=a, v=v))
        lines += [f"      _p{n_in + j}[_k * _R + _r] = {p.name};" for j, p in stored]
        lines.append("    }")
        m = 0
        for kind, a, _ in folds if spec.pairwise else ():
            if kind == "sum":  # numpy adds its pairwise sum to 0
                lines.append(f"    {a} += pairwise_sum(_buf{m}.data(), _R);")
                m += 1
        lines += [f"    {line}" for line in after]
    lines += [f"    _tot{m}[_k] = {v};" for m, (_, v) in enumerate(spec.totals)]
    lines += [f"    _p{n_in + j}[_k] = {p.name};" for j, p in enumerate(outs)
              if spec.levels[n_in + j] == "row"]
    return "\n".join(lines + ["  }", "  }"] + _finish(spec, ctype, "_bad" if labels else "0"))


def _finish(spec, ctype, result="0") -> list:
    """After the rows: the sums of their totals (numpy adds its pairwise sum to 0),
    the statements on them, the total outputs."""
    n_in, lines = len(spec.inputs), []
    for m, (a, _) in enumerate(spec.totals):
        lines += [f"  {ctype} {a} = 0;", f"  {a} += pairwise_sum(_tot{m}.data(), _K);"]
    lines += [f"  {ctype} {p.name};" for j, p in enumerate(spec.outputs)
              if spec.levels[n_in + j] == "total"]
    lines += [f"  {line}" for line in spec.finish]
    lines += [f"  _p{n_in + j}[0] = {p.name};" for j, p in enumerate(spec.outputs)
              if spec.levels[n_in + j] == "total"]
    return lines + [f"  return {result};", "}", ""]


def _column_loops(spec, ctype) -> list:
    ins, outs, n_in = spec.inputs, spec.outputs, len(spec.inputs)
    (element, folds, after), = spec.passes
    lines = ["  constexpr npy_intp _B = 256;  // kept positions a block",
             "  _Pragma(\"omp parallel for num_threads(_threads) if (_threads > 1 && _K > _B "
             "&& threads_ok)\")", "  for (npy_intp _kb = 0; _kb < _K; _kb += _B) {",
             "    const npy_intp _end = _kb + _B < _K ? _kb + _B : _K;"]
    lines += [f"    {ctype} _col{a}[_B];" for _, a, _ in folds]
    lines += [f"    for (npy_intp _k = 0; _k < _B; ++_k) _col{a}[_k] = {_START[kind]};"
              for kind, a, _ in folds]
    stored = [(j, p) for j, p in enumerate(outs) if spec.levels[n_in + j] == "full"]
    lines += ["    for (npy_intp _r = 0; _r < _R; ++_r) {", "      _Pragma(\"omp simd\")",
              "      for (npy_intp _k = _kb; _k < _end; ++_k) {"]
    lines += [f"        const {ctype} {p.name} = _p{j}[_k * _k{j} + _r * _r{j}];"
              for j, p in enumerate(ins) if spec.levels[j] == "full" and not once(spec, j)]
    lines += [f"        {ctype} {p.name};" for _, p in stored]
    lines += [f"        {line}" for line in element]
    lines += ["        " + _FOLDS[kind].format(a=f"_col{a}[_k - _kb]", v=v)
              for kind, a, v in folds]
    lines += [f"        _p{n_in + j}[_r * _K + _k] = {p.name};" for j, p in stored]
    lines += ["      }", "    }", "    for (npy_intp _k = _kb; _k < _end; ++_k) {"]
    lines += [f"      const {ctype} {p.name} = _p{j}[_k * _k{j}];" for j, p in enumerate(ins)
              if spec.levels[j] == "row" and not once(spec, j)]
    lines += [f"      {ctype} {p.name};" for j, p in enumerate(outs)
              if spec.levels[n_in + j] == "row"]
    lines += [f"      const {ctype} {a} = _col{a}[_k - _kb];" for _, a, _ in folds]
    lines += [f"      {line}" for line in after]
    lines += [f"      _tot{m}[_k] = {v};" for m, (_, v) in enumerate(spec.totals)]
    lines += [f"      _p{n_in + j}[_k] = {p.name};" for j, p in enumerate(outs)
              if spec.levels[n_in + j] == "row"]
    return lines + ["    }", "  }"]


def reduction_call(spec, fn, threads: int, numpy=None):
    """The callable of a reduction kernel: the group's input arrays -> its outputs.
    fn(*inputs, *outputs) is the kernel's builtin (cpu.py), given the arrays as they
    are, and again with copies laid out as it reads them (layouts) where it refused
    one (another dtype, a broadcast across rows that is no one stride); the outputs
    are fresh arrays of their shapes (laid out reduced axes first, then transposed,
    for a kernel that runs by columns); its rows run on `threads` OpenMP threads.
    numpy() -> the group's numpy calls, which run instead where a sum's input is laid
    out otherwise than in C order. A kernel of symbolic sizes takes their values
    (sizes=, an intp array in spec.sizes' order), which fn receives after the outputs."""
    axes, n_in, sources = spec.axes, len(spec.inputs), spec.sources
    order = [d for d in range(len(spec.shape)) if d not in axes] + list(axes)
    # full outputs of a kernel that runs by columns: laid out reduced axes first
    order_out = list(axes) + order[:len(spec.shape) - len(axes)] if columns(spec) else order
    back = tuple(int(d) for d in np.argsort(order_out))
    direct = order_out == sorted(order_out)  # laid out as numpy's
    levels = spec.levels[n_in:]
    summed = numpy is not None and any(kind == "sum" for _, folds, _ in spec.passes
                                       for kind, _, _ in folds)
    pick = operator.itemgetter(*sources) if len(sources) > 1 else lambda a: (a[sources[0]],)
    shapes_at = evaluator((tuple(spec.shape), tuple(p.shape for p in spec.inputs),
                           tuple(p.shape for p in spec.outputs),
                           tuple(target for target, _, _ in layouts(spec))), spec.sizes)

    def needs_at(sizes: tuple) -> tuple:
        """What the call needs where the symbolic sizes are `sizes`: the outputs'
        (shape, dtype), the inputs' layouts, the C-ordered strides of the full inputs
        a sum reads (numpy computes from arrays laid out otherwise in another order,
        and adds each row so), the length of a row, the arguments after the outputs
        (the intp array of the sizes)."""
        shape, ins, outs, targets = shapes_at(sizes)
        made = [(tuple(shape[d] for d in order_out) if level == "full" else o,
                 np.dtype(p.dtype)) for o, p, level in zip(outs, spec.outputs, levels)]
        ordered = [(i, np.empty(x, p.dtype).strides)
                   for k, (i, x, p) in enumerate(zip(sources, ins, spec.inputs))
                   if spec.levels[k] == "full"] if summed else []
        walks = [(target, walk) for target, (_, walk, _) in zip(targets, layouts(spec))]
        return made, walks, ordered, _size([shape[d] for d in axes]), size_array(spec, sizes)
    at = per_sizes(spec, needs_at)

    def laid_out(k, x, walks):
        p, (target, walk) = spec.inputs[k], walks[k]
        x = np.asarray(x)
        if x.dtype != p.dtype or not x.flags.aligned:
            if not np.can_cast(x.dtype, p.dtype, "equiv"):
                raise TypeError(f"kernel {spec.name}: input {p.name} is {x.dtype}, the kernel "
                                f"was compiled for {p.dtype}; retrace with inputs of that dtype")
            x = x.astype(np.dtype(p.dtype).newbyteorder("="))
        walked = np.broadcast_to(x, target).transpose(walk).copy()  # in C order
        return walked.transpose(np.argsort(walk).astype(int))

    def run_reduction(*arrays, sizes=()):
        made, walks, ordered, width, extra = at(sizes)
        if ordered and not all(getattr(arrays[i], "strides", None) == c or _c_ordered(arrays[i])
                               for i, c in ordered):
            return numpy()(*arrays, *((sizes,) if spec.sizes else ()))
        outs = [np.empty(*m) for m in made]
        refused = fn(*pick(arrays), *outs, *extra)
        if 0 < refused <= n_in:
            refused = fn(*[laid_out(k, arrays[i], walks) for k, i in enumerate(sources)],
                         *outs, *extra)
        if refused == -3:
            raise IndexError(f"kernel {spec.name} ({spec.comment.split(': ', 1)[1]}): a "
                             f"label is out of range; labels are class ids in 0..{width - 1}")
        if refused:
            raise RuntimeError(f"kernel {spec.name} refused its arguments ({refused})")
        # full results in C order, as numpy gives them: its sums of them add in that order
        return tuple(outs) if direct else tuple(
            np.ascontiguousarray(o.transpose(back)) if level == "full" else o
            for o, level in zip(outs, levels))
    run_reduction.__name__ = run_reduction.__qualname__ = f"kernel_{spec.name}"
    run_reduction.threads = threads
    return run_reduction


def _c_ordered(x) -> bool:
    """Whether numpy lays out what it computes from x in C order: the strides of x's
    axes of more than one element, broadcast ones aside, shrink from the first axis
    to the last (numpy flips negative ones)."""
    strides = [abs(s) for s, n in zip(getattr(x, "strides", ()), np.shape(x)) if n > 1 and s]
    return all(a > b for a, b in zip(strides, strides[1:]))
