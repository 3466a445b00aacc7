"""ReductionKernel of the double: map, reduce and post-map compiled for the host and run.

cupy 14 generates one CUDA kernel around the three expressions: each output element
is folded by a block of threads, thread t folding map_expr of the reduced positions
J = t, t + n, t + 2n ... (n threads an element) into REDUCE(a, b) from `identity`,
then the n partial results folded in halves (a tree in shared memory), then
POST_MAP(a) with the output params bound to that element. Here the same expressions,
macros and scopes (input arrays only in the map, scalars and outputs in post_map) go
into C++ loops for the host, which add in that order, with the n cupy picks by
default; compiled and cached as ElementwiseKernel's (_kernel.py), with `__device__`
and the infinities of cupy's math_constants.h (CUDART_INF_F, CUDART_INF) defined.

The call keeps cupy's rules: `axis` (None: all; an int or a tuple), `keepdims`, `out`
(one output only) or outputs given positionally, inputs broadcast together, dtypes as
ElementwiseKernel's, numpy arrays refused, a zero-size reduction only with an
identity, and the first output returned (as cupy's ReductionKernel does, whatever
the number of outputs). A call that cupy hands to CUB (its default accelerator: one
input and one output, contiguous, its reduced axes at one end, 128 elements or more
an output) is refused: CUB adds in another order, and its two-pass full reductions
apply post_map twice, which the double does not reproduce. Raw params are arrays
the expressions index themselves (x[k]: element k in C order), outside broadcasting
and of any shape (a raw input needs its reduced axes leading, as in cupy).
"""
import ctypes
import os

import numpy

from cupy import _array
from cupy._kernel import RAW, _load, _params, decide_types

SOURCE = """// cupy test double: a ReductionKernel's expressions in loops for the host.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>
using namespace std;
// What cupy's headers give a kernel that the host's lack.
#define __device__
#define CUDART_INF_F INFINITY
#define CUDART_INF static_cast<double>(INFINITY)
%(raw)s%(typedefs)s%(preamble)s
#define REDUCE(a, b) (%(reduce_expr)s)
#define POST_MAP(a) (%(post_map_expr)s)
typedef %(reduce_type)s _type_reduce;
extern "C" void %(name)s(char* const* _fc_ptr, const int64_t* _fc_strides,
                         const int64_t* _fc_shape, int _fc_nreduce, int _fc_ndim,
                         const int64_t* _fc_raw_dims, int64_t _fc_in_size,
                         int64_t _fc_out_size, int64_t _fc_n) {
  const int64_t* _fc_rd = _fc_raw_dims;  // each raw array's ndim, shape and strides
%(scalars)s
  vector<_type_reduce> _fc_part(_fc_n, _type_reduce(%(identity)s));
  for (ptrdiff_t _i = 0; _i < _fc_out_size; ++_i) {
    int64_t _fc_at[%(nargs)d] = {0};  // each array's element at (J = 0, _i)
    for (int64_t _fc_d = _fc_ndim - 1, _fc_rest = _i; _fc_d >= _fc_nreduce; --_fc_d) {
      const int64_t _fc_k = _fc_rest %% _fc_shape[_fc_d];
      _fc_rest /= _fc_shape[_fc_d];
      for (int _fc_a = 0; _fc_a < %(nargs)d; ++_fc_a)
        _fc_at[_fc_a] += _fc_k * _fc_strides[_fc_a * _fc_ndim + _fc_d];
    }
    for (int64_t _fc_t = 0; _fc_t < _fc_n; ++_fc_t) _fc_part[_fc_t] = _type_reduce(%(identity)s);
    for (ptrdiff_t _J = 0; _J < _fc_in_size; ++_J) {
      int64_t _fc_off[%(nargs)d];
      for (int _fc_a = 0; _fc_a < %(nargs)d; ++_fc_a) _fc_off[_fc_a] = _fc_at[_fc_a];
      for (int64_t _fc_d = _fc_nreduce - 1, _fc_rest = _J; _fc_d >= 0; --_fc_d) {
        const int64_t _fc_k = _fc_rest %% _fc_shape[_fc_d];
        _fc_rest /= _fc_shape[_fc_d];
        for (int _fc_a = 0; _fc_a < %(nargs)d; ++_fc_a)
          _fc_off[_fc_a] += _fc_k * _fc_strides[_fc_a * _fc_ndim + _fc_d];
      }
%(inputs)s
      _type_reduce _a = static_cast<_type_reduce>(%(map_expr)s);
      _type_reduce& _fc_s = _fc_part[_J %% _fc_n];
      _fc_s = REDUCE(_fc_s, _a);
    }
    for (int64_t _fc_h = _fc_n / 2; _fc_h >= 1; _fc_h /= 2)
      for (int64_t _fc_t = 0; _fc_t < _fc_h; ++_fc_t) {
        _type_reduce _a = _fc_part[_fc_t], _b = _fc_part[_fc_t + _fc_h];
        _fc_part[_fc_t] = REDUCE(_a, _b);
      }
    _type_reduce _s = _fc_part[0];
%(outputs)s
    POST_MAP(_s);
  }
}
"""


def _normalized_axes(axis, ndim):
    """cupy's reduce axes, sorted, and the kept ones."""
    if axis is None:
        axes = tuple(range(ndim))
    else:
        axes = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        error = getattr(numpy, "exceptions", numpy).AxisError
        for a in axes:
            if not -ndim <= a < ndim:
                raise error(a, ndim)
        axes = tuple(sorted(a % ndim for a in axes))
    kept = tuple(d for d in range(ndim) if d not in axes)
    if len(axes) + len(kept) != ndim:
        raise ValueError("duplicate value in 'axis'")
    return axes, kept


def _threads_an_element(arrays, out_ndim, in_size, out_size):
    """n: how many threads of cupy's default block (512) fold one output element, as
    cupy 14 picks it from the sizes and from whether the inputs' kept positions lie
    next to each other in memory (arrays: the inputs, reduced axes first)."""
    contiguous = 1
    if out_ndim and any(a.flags.c_contiguous or a.strides[-1] == a.itemsize
                        for a in arrays):
        contiguous = out_size
    stride = max(min(contiguous, 32), 512 // max(1, in_size // out_size))
    stride = 1 << (stride // 2).bit_length()  # the power of two above stride // 2
    return 512 // stride


def _takes_cub(ins, arrays, outs, axes, kept):
    """Whether cupy would run this call through CUB (see the module docstring)."""
    if "cub" not in os.environ.get("CUPY_ACCELERATORS", "cub").split(",") or \
            len(ins) != 1 or len(outs) != 1 or not axes:
        return False
    a = arrays[0]
    order = axes + kept if a.flags.f_contiguous else kept + axes if a.flags.c_contiguous \
        else None
    size = int(numpy.prod([a.shape[d] for d in axes]))
    return order == tuple(range(a.ndim)) and size >= 128


class ReductionKernel:
    """cupy.ReductionKernel(in_params, out_params, map_expr, reduce_expr, post_map_expr,
    identity, name, reduce_type, reduce_dims, preamble, options), run on the host: see
    the module docstring for the rules it keeps."""

    def __init__(self, in_params, out_params, map_expr, reduce_expr, post_map_expr,
                 identity, name="reduce_kernel", reduce_type=None, reduce_dims=True,
                 preamble="", options=()):
        if not name.isidentifier() or not name.isascii():
            raise ValueError(f'Invalid kernel name: "{name}"')
        self.in_params, self.out_params = _params(in_params, True), _params(out_params, False)
        self.nin, self.nout = len(self.in_params), len(self.out_params)
        self.nargs = self.nin + self.nout
        self.map_expr, self.reduce_expr, self.post_map_expr = map_expr, reduce_expr, \
            post_map_expr
        self.identity = "" if identity is None else str(identity)
        self.name, self.preamble, self.options = name, preamble, options
        self.reduce_type = self.out_params[0].ctype if reduce_type is None else reduce_type
        self.reduce_dims = reduce_dims
        self._libraries = {}

    def __call__(self, *args, out=None, axis=None, keepdims=False, stream=None, **kwargs):
        if kwargs:
            raise TypeError(f"Wrong arguments {kwargs}")
        if len(args) not in (self.nin, self.nargs):
            raise TypeError(f"Wrong number of arguments for {self.name}")
        outs = list(args[self.nin:])
        if out is not None:
            if self.nout != 1:
                raise NotImplementedError("")
            if outs:
                raise ValueError("cannot specify 'out' as both a positional and keyword "
                                 "argument")
            outs = [out]
        ins = list(args[:self.nin])
        for arg in ins + outs:
            if not isinstance(arg, (_array.ndarray, bool, int, float, complex, numpy.generic)):
                raise TypeError(f"Unsupported type {type(arg)}")
        arrays = [a for p, a in zip(self.in_params, ins)
                  if isinstance(a, _array.ndarray) and not p.raw]
        if not arrays:
            raise ValueError("Loop size is undecided.")
        try:
            shape = numpy.broadcast_shapes(*(a.shape for a in arrays))
        except ValueError:
            raise ValueError("operands could not be broadcast together with shapes " +
                             " ".join(str(a.shape) for a in arrays)) from None
        in_types, out_types, typedefs = decide_types(self.in_params, self.out_params, ins,
                                                     outs)
        axes, kept = _normalized_axes(axis, len(shape))
        out_shape = tuple(1 if d in axes else n for d, n in enumerate(shape)) if keepdims \
            else tuple(shape[d] for d in kept)
        if outs:
            for p, o in zip(self.out_params, outs):
                if o.shape != out_shape and not p.raw:
                    raise ValueError("Out shape is mismatched")
        elif any(p.raw for p in self.out_params):
            raise ValueError("Output array size is Undecided")
        else:
            outs = [_array.ndarray(out_shape, t) for t in out_types]
        out_size = int(numpy.prod(out_shape, dtype=numpy.int64))
        if out_size == 0:
            return outs[0]
        if self.identity == "" and 0 in shape:
            raise ValueError(f"zero-size array to reduction operation {self.name} which has "
                             f"no identity")
        views = [numpy.broadcast_to(a._a, shape) for a in arrays]
        if _takes_cub(ins, views, outs, axes, kept):
            raise NotImplementedError(
                f"ReductionKernel {self.name}: cupy would run this call through CUB (one "
                f"input and one output, contiguous, {len(axes)} reduced axes at one end of "
                f"{shape}), whose order and two-pass post_map the cupy test double does not "
                f"reproduce; pass a second input or output to keep cupy on its own kernel")
        if len(ins) == 1 and len(kept) <= 1 and not views[0].flags.c_contiguous:
            # cupy's one-input case: reduced axes in order of decreasing stride
            axes = tuple(sorted(axes, key=lambda d: -abs(views[0].strides[d])))
        if axes + kept != tuple(range(len(shape))) and any(p.raw for p in self.in_params):
            raise NotImplementedError("Illegal conditions")
        views = [v.transpose(axes + kept) for v in views]
        in_size = int(numpy.prod([shape[d] for d in axes], dtype=numpy.int64))
        n = _threads_an_element(views, len(out_shape), in_size, out_size)
        # Outputs as arrays over the reduced axes (stride 0) and the kept ones; a raw
        # one as it is.
        host = [o._a if p.raw else numpy.lib.stride_tricks.as_strided(
            o._a, (*(shape[d] for d in axes), *(shape[d] for d in kept)),
            (0,) * len(axes) + tuple(o._a.strides[d] for d in kept) if keepdims else
            (0,) * len(axes) + o._a.strides) for p, o in zip(self.out_params, outs)]
        # Per in param its array (reduced axes first), a raw one as it is, or its
        # scalar cast to its type.
        loops = iter(views)
        host = [a._a if p.raw else next(loops) if isinstance(a, _array.ndarray) else
                numpy.asarray(a, t) for p, a, t in zip(self.in_params, ins, in_types)] + host
        is_array = tuple(isinstance(a, _array.ndarray) for a in ins)
        self._launch(host, is_array, len(axes), typedefs, (in_size, out_size, n))
        return outs[0]

    def _launch(self, host, is_array, nreduce, typedefs, sizes):
        key = (tuple(sorted(typedefs.items())), is_array)
        if key not in self._libraries:
            self._libraries[key] = _load(self._source(typedefs, is_array), self.name)
        params = self.in_params + self.out_params
        kinds = is_array + (True,) * self.nout
        loops = [a for p, a, array in zip(params, host, kinds) if array and not p.raw]
        raws = [a for p, a in zip(params, host) if p.raw]
        pointers = (ctypes.c_void_p * len(host))(
            *[a.__array_interface__["data"][0] for a in host])
        strides = numpy.array([s for a in loops for s in a.strides] or [0], numpy.int64)
        dims = numpy.array(loops[0].shape or (1,), numpy.int64)
        raw_dims = numpy.array([n for a in raws for n in (a.ndim, *a.shape, *a.strides)]
                               or [0], numpy.int64)
        self._libraries[key](pointers, strides.ctypes.data_as(ctypes.c_void_p),
                             dims.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(nreduce),
                             ctypes.c_int(loops[0].ndim),
                             raw_dims.ctypes.data_as(ctypes.c_void_p),
                             *(ctypes.c_int64(s) for s in sizes))

    def _source(self, typedefs, is_array):
        """The C++ for one layout: array inputs bound in the loop over the reduced
        positions (where cupy binds them: post_map cannot read them), outputs before
        POST_MAP, scalars and raw arrays (element k in C order) for the whole kernel."""
        inputs, whole, k = [], [], 0
        params = self.in_params + self.out_params
        for j, (p, array) in enumerate(zip(params, is_array + (True,) * self.nout)):
            const = "const " if p.is_const else ""
            if p.raw:
                whole.append(f"  const _fc_raw<{const}{p.ctype}> {p.name}{{_fc_ptr[{j}], "
                             f"int(_fc_rd[0]), _fc_rd + 1, _fc_rd + 1 + _fc_rd[0]}};\n"
                             f"  _fc_rd += 1 + 2 * _fc_rd[0];")
            elif not array:
                whole.append(f"  const {p.ctype} {p.name} = *reinterpret_cast<const "
                             f"{p.ctype}*>(_fc_ptr[{j}]);")
            elif j < self.nin:
                inputs.append(f"      const {p.ctype} {p.name} = *reinterpret_cast<const "
                              f"{p.ctype}*>(_fc_ptr[{j}] + _fc_off[{k}]);")
                k += 1
        outputs = []
        for m, p in enumerate(self.out_params):
            if not p.raw:
                outputs.append(f"    {p.ctype} &{p.name} = *reinterpret_cast<{p.ctype}*>("
                               f"_fc_ptr[{self.nin + m}] + _fc_at[{k + len(outputs)}]);")
        return SOURCE % {
            "raw": RAW,
            "typedefs": "".join(f"typedef {c} {t};\n" for t, c in sorted(typedefs.items())),
            "preamble": self.preamble, "reduce_expr": self.reduce_expr,
            "post_map_expr": self.post_map_expr, "reduce_type": self.reduce_type,
            "name": self.name, "scalars": "\n".join(whole), "identity": self.identity,
            "nargs": max(k + len(outputs), 1), "inputs": "\n".join(inputs),
            "map_expr": self.map_expr, "outputs": "\n".join(outputs)}
