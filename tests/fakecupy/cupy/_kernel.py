"""ElementwiseKernel of the double: the CUDA body compiled for the host and run.

cupy wraps the operation in a loop over the broadcast index space and compiles it
with NVRTC; here the same operation goes into a C++ loop compiled with the host's
C++ compiler (CXX, else c++) into a shared library, cached on disk by the hash of its
source (CUPY_CACHE_DIR, else ~/.cache/dezero/fakecupy) and called with ctypes. The
launch follows cupy 14: params typed by a dtype name or generic (one letter, the same
dtype wherever it appears), inputs that are the double's arrays or Python/numpy
scalars (a numpy array is refused), arrays of exactly the typed dtype, inputs
broadcast to one shape, outputs allocated in their types (or given, of that shape);
`raw` params, which the body indexes itself (x[k]: element k of x in C order, at its
own strides; any k of a 0-d array), with cupy's rules for `size` (given exactly when
every array argument is raw) and for raw outputs (given, or made of shape (size,));
the infinities of cupy's math_constants.h (CUDART_INF_F, CUDART_INF) defined.
"""
import ctypes
import hashlib
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

import numpy

from cupy import _array

CTYPES = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
          "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short",
          "uint32": "unsigned int", "uint64": "unsigned long long", "float32": "float",
          "float64": "double"}

SOURCE = """// cupy test double: an ElementwiseKernel's operation in a loop for the host.
#include <cmath>
#include <cstddef>
#include <cstdint>
using namespace std;
// The infinities of cupy's math_constants.h, which cupy includes in every kernel.
#define CUDART_INF_F INFINITY
#define CUDART_INF static_cast<double>(INFINITY)
%(raw)s%(typedefs)s%(preamble)s
extern "C" void %(name)s(char* const* _fc_ptr, const int64_t* _fc_strides,
                         const int64_t* _fc_shape, int _fc_ndim, int64_t _fc_size,
                         const int64_t* _fc_raw_nd, const int64_t* _fc_raw_dims) {
  for (ptrdiff_t i = 0; i < _fc_size; ++i) {
    int64_t _fc_off[%(nargs)d] = {0};
    int64_t _fc_rest = i;
    for (int _fc_d = _fc_ndim - 1; _fc_d >= 0; --_fc_d) {
      const int64_t _fc_k = _fc_rest %% _fc_shape[_fc_d];
      _fc_rest /= _fc_shape[_fc_d];
      for (int _fc_a = 0; _fc_a < %(nargs)d; ++_fc_a)
        _fc_off[_fc_a] += _fc_k * _fc_strides[_fc_a * _fc_ndim + _fc_d];
    }
%(refs)s
%(operation)s;
  }
}
"""


RAW = """// A raw param: element k in C order of an array at its own shape and strides.
template <class T> struct _fc_raw {
  char* p; int nd; const int64_t* shape; const int64_t* strides;
  T& operator[](ptrdiff_t k) const {
    int64_t off = 0;
    for (int d = nd - 1; d >= 0; --d) { off += (k % shape[d]) * strides[d]; k /= shape[d]; }
    return *reinterpret_cast<T*>(p + off);
  }
};
"""


class _Param:
    """One parameter: "float32 x" (typed), "T x" (generic), "raw float32 x"."""

    def __init__(self, text, is_const):
        words = text.split()
        if len(words) < 2:
            raise Exception(f"Syntax error: {text}")
        for word in words[:-2]:
            if word not in ("raw", "_non_const"):
                raise Exception(f'Unknown keyword "{word}"')
            if word == "_non_const":
                raise NotImplementedError(f"the cupy test double does not run _non_const "
                                          f"params ({text.strip()})")
        kind, self.name = words[-2:]
        self.is_const, self.raw = is_const, "raw" in words[:-2]
        if len(kind) == 1:
            self.dtype, self.ctype = None, kind
        else:
            self.dtype = numpy.dtype(kind)
            if self.dtype.name not in CTYPES:
                raise NotImplementedError(f"the cupy test double has no C type for {kind}")
            self.ctype = CTYPES[self.dtype.name]


def _params(text, is_const):
    return tuple(_Param(p, is_const) for p in text.split(",")) if text.strip() else ()


def decide_types(in_params, out_params, ins, outs):
    """cupy's rules: outputs given fix their types first, then the input arrays;
    a typed param takes only its dtype, a generic one one dtype throughout."""
    types = {}

    def settle(p, dtype):
        if p.dtype is not None:
            if dtype != p.dtype:
                raise TypeError(f"Type is mismatched. {p.name} {dtype} {p.dtype}")
        elif p.ctype in types and types[p.ctype] != dtype:
            raise TypeError(f"Type is mismatched. {p.name} {dtype} {types[p.ctype]} "
                            f"{p.ctype}")
        else:
            types[p.ctype] = dtype
    for p, a in zip(out_params, outs):
        if not isinstance(a, _array.ndarray):
            raise TypeError("Output arguments must be cupy.ndarray")
        settle(p, a.dtype)
    for p, a in zip(in_params, ins):
        if isinstance(a, _array.ndarray):
            settle(p, a.dtype)
    for p in in_params + out_params:
        if p.dtype is None and p.ctype not in types:
            raise TypeError(f"the type of {p.ctype} ({p.name}) is undecided: only scalars "
                            f"give it")
    typed = [p.dtype if p.dtype is not None else types[p.ctype]
             for p in in_params + out_params]
    typedefs = {c: CTYPES[d.name] for c, d in types.items()}
    return typed[:len(in_params)], typed[len(in_params):], typedefs


class ElementwiseKernel:
    """cupy.ElementwiseKernel(in_params, out_params, operation, name, ...), run on the
    host: see the module docstring for the rules it keeps."""

    def __init__(self, in_params, out_params, operation, name="kernel", reduce_dims=True,
                 preamble="", no_return=False, return_tuple=False, **kwargs):
        if not name.isidentifier():
            raise ValueError(f'Invalid kernel name: "{name}"')
        self.in_params, self.out_params = _params(in_params, True), _params(out_params, False)
        self.nin, self.nout = len(self.in_params), len(self.out_params)
        self.nargs = self.nin + self.nout
        self.operation, self.name, self.preamble = operation, name, preamble
        self.no_return, self.return_tuple = no_return, return_tuple
        if "i" in [p.name for p in self.in_params + self.out_params]:
            raise ValueError("Can not use 'i' as a parameter name")
        self._libraries = {}

    def __call__(self, *args, size=-1, stream=None, block_size=128):
        if len(args) not in (self.nin, self.nargs):
            raise TypeError(f"Wrong number of arguments for {self.name!r}. It must be either "
                            f"{self.nin} or {self.nargs} (with outputs), but given {len(args)}.")
        for arg in args:
            if not isinstance(arg, (_array.ndarray, bool, int, float, complex, numpy.generic)):
                raise TypeError(f"Unsupported type {type(arg)}")
        ins, outs = list(args[:self.nin]), list(args[self.nin:])
        params = self.in_params + self.out_params
        arrays = [a for p, a in zip(params, args) if isinstance(a, _array.ndarray) and not p.raw]
        if size != -1:
            if arrays:
                raise ValueError("Specified 'size' can be used only if all of the ndarray "
                                 "are 'raw'.")
            shape = (size,)
        elif not arrays:
            raise ValueError("Loop size is Undecided")
        else:
            try:
                shape = numpy.broadcast_shapes(*(a.shape for a in arrays))
            except ValueError:
                raise ValueError("operands could not be broadcast together with shapes " +
                                 " ".join(str(a.shape) for a in arrays)) from None
        in_types, out_types, typedefs = decide_types(self.in_params, self.out_params, ins, outs)
        for k, (p, out) in enumerate(zip(self.out_params, outs)):
            if not isinstance(out, _array.ndarray):
                raise TypeError("Output arguments type must be cupy.ndarray")
            if out.shape != shape and not p.raw:
                raise ValueError("Out shape is mismatched")
        if not outs:
            if size == -1 and any(p.raw for p in self.out_params):
                raise ValueError("Output array size is Undecided")
            outs = [_array.ndarray(shape, t) for t in out_types]
        result = None if self.no_return else (
            outs[0] if self.nout == 1 and not self.return_tuple else tuple(outs))
        if 0 in shape:
            return result
        # Scalars are cast to their param's type, as cupy's CScalar.apply_dtype does;
        # a raw array keeps its own shape and strides (its loop strides are 0).
        host = [a._a if p.raw else
                numpy.broadcast_to(a._a if isinstance(a, _array.ndarray)
                                   else numpy.asarray(a, t), shape)
                for p, a, t in zip(self.in_params, ins, in_types)]
        host += [o._a for o in outs]
        self._launch(host, shape, typedefs)
        return result

    def _launch(self, arrays, shape, typedefs):
        key = tuple(sorted(typedefs.items()))
        if key not in self._libraries:
            self._libraries[key] = _load(self._source(typedefs), self.name)
        function = self._libraries[key]
        ndim = len(shape)
        params = self.in_params + self.out_params
        pointers = (ctypes.c_void_p * len(arrays))(
            *[a.__array_interface__["data"][0] for a in arrays])
        # The loop's strides of each argument (0 for a raw one: it indexes itself) ...
        strides = numpy.array([s for p, a in zip(params, arrays)
                               for s in ((0,) * ndim if p.raw else a.strides)] or [0],
                              numpy.int64)
        # ... and a raw one's own ndim, then its shape and strides, in _fc_raw_dims.
        raw_nd = numpy.array([a.ndim for a in arrays] or [0], numpy.int64)
        raw_dims = numpy.array([n for a in arrays for n in (*a.shape, *a.strides)] or [0],
                               numpy.int64)
        dims = numpy.array(shape or (1,), numpy.int64)
        function(pointers, strides.ctypes.data_as(ctypes.c_void_p),
                 dims.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(ndim),
                 ctypes.c_int64(int(numpy.prod(shape, dtype=numpy.int64))),
                 raw_nd.ctypes.data_as(ctypes.c_void_p),
                 raw_dims.ctypes.data_as(ctypes.c_void_p))

    def _source(self, typedefs):
        refs, at = [], "0"  # at: where argument k's shape and strides begin in _fc_raw_dims
        for k, p in enumerate(self.in_params + self.out_params):
            const = "const " if p.is_const else ""
            if p.raw:
                refs.append(f"    const _fc_raw<{const}{p.ctype}> {p.name}{{_fc_ptr[{k}], "
                            f"int(_fc_raw_nd[{k}]), _fc_raw_dims + {at}, _fc_raw_dims + {at}"
                            f" + _fc_raw_nd[{k}]}};")
            else:
                refs.append(f"    {const}{p.ctype} &{p.name} = *reinterpret_cast<{const}"
                            f"{p.ctype}*>(_fc_ptr[{k}] + _fc_off[{k}]);")
            at = f"{at} + 2 * _fc_raw_nd[{k}]"
        return SOURCE % {
            "raw": RAW,
            "typedefs": "".join(f"typedef {c} {t};\n" for t, c in sorted(typedefs.items())),
            "preamble": self.preamble, "name": self.name, "nargs": max(self.nargs, 1),
            "refs": "\n".join(refs), "operation": self.operation}


# =============================================================================
# Compiling: one shared library per distinct source, cached on disk
# =============================================================================

_LOADED = {}


def cache_dir() -> Path:
    folder = os.environ.get("CUPY_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dezero",
        "fakecupy")
    return Path(folder).resolve()


def _load(source, name):
    digest = hashlib.sha256(source.encode()).hexdigest()[:32]
    if digest not in _LOADED:
        library = _build(source, digest)
        function = getattr(ctypes.CDLL(str(library)), name)
        function.restype = None
        _LOADED[digest] = function
    return _LOADED[digest]


def _build(source, digest):
    folder = cache_dir()
    library = folder / f"{digest}.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    command = shlex.split(os.environ.get("CXX") or "c++")
    with tempfile.TemporaryDirectory(dir=folder) as work:
        src, out = Path(work) / "kernel.cpp", Path(work) / "kernel.so"
        src.write_text(source)
        done = subprocess.run([*command, "-std=c++17", "-O1", "-shared", "-fPIC",
                               "-ffp-contract=off", str(src), "-o", str(out)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            from cupy.cuda.compiler import CompileException
            raise CompileException(done.stderr, source, "kernel", ())
        os.replace(out, library)  # atomic: a reader sees a whole library or none
    return library
