"""The "cpu" backend: a graph's fused groups as C++ kernels, the rest as replay code.

backends/ stage (see backends/__init__.py). Every kernel spec of a graph (codegen.py)
is wrapped in a loop, and all of them are compiled with the system C++ compiler
into ONE shared library, loaded with ctypes; pycode.py's replay code calls them
in place of the groups' nodes. Libraries are cached on disk by a sha256 of source,
flags, compiler, Python, numpy and CPU, in DEZERO_CACHE_DIR (default
~/.cache/dezero/kernels). Without a compiler (CXX, or c++/g++/clang++ on PATH) or
Python's C headers, graphs replay unfused with one warning.

    plan = graph.compile("cpu"); print(plan.kernel_source)
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

from dezero.static import debugging
from dezero.static.backends import pycode

# =============================================================================
# Toolchain: compiler, FLAGS, cache_dir
# =============================================================================

# No -ffast-math: inf and NaN keep their meaning. -ffp-contract=off: a * b + c is
# rounded twice, as numpy rounds it (an FMA would differ in the last bit).
# -fno-math-errno lets sqrt and the vector math library run without setting
# errno; -march=native is why the CPU's identity is part of the cache key.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fopenmp",
         "-fPIC", "-shared", "-std=c++17")

# Below this many elements a kernel runs on one thread: starting OpenMP's team
# costs more than it saves.
PARALLEL_MIN = 1 << 18


class CompileError(RuntimeError):
    """The C++ compiler refused a generated library."""


@functools.cache
def compiler() -> tuple | None:
    """(command, version line) of the C++ compiler, or None with the reason in
    `missing_reason()`. The command is $CXX split as a shell would ("ccache g++",
    "g++-12 -std=c++17"), else the first of c++, g++, clang++ on PATH."""
    commands = [["c++"], ["g++"], ["clang++"]]
    if os.environ.get("CXX", "").strip():
        try:
            commands = [shlex.split(os.environ["CXX"])]
        except ValueError:  # unbalanced quotes: missing_reason() shows CXX
            return None
    for name, *arguments in commands:
        path = shutil.which(name)
        if path:
            command = (path, *arguments)
            run = subprocess.run([*command, "--version"], capture_output=True, text=True)
            if run.returncode == 0:
                return command, (run.stdout.splitlines() or ["unknown version"])[0]
    return None


def missing_reason() -> str | None:
    """Why no kernel can be built or called here, or None."""
    if compiler() is None:
        where = f"CXX={os.environ['CXX']!r}" if os.environ.get("CXX") else \
            "c++, g++ or clang++ on PATH"
        return f"no C++ compiler found ({where})"
    if sysconfig.get_config_var("Py_GIL_DISABLED") or sys.implementation.name != "cpython":
        return "kernels read arrays through CPython's object layout, which this " \
               f"Python ({sys.implementation.name}, free-threaded or not) does not have"
    return None


def cache_dir() -> Path:
    """Where compiled libraries live: $DEZERO_CACHE_DIR or ~/.cache/dezero/kernels,
    made absolute (dlopen looks for a bare "name.so" on the system's paths)."""
    return Path(os.environ.get("DEZERO_CACHE_DIR") or
                Path.home() / ".cache" / "dezero" / "kernels").absolute()


@functools.cache
def _cpu_identity() -> str:
    """The CPU's feature flags (what -march=native compiles for)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        return re.search(r"^flags\s*:(.*)$", text, re.M).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or platform.machine()


# =============================================================================
# Vector math: which <cmath> functions have SIMD versions (glibc's libmvec)
# =============================================================================

# Functions with float and double vector versions in glibc >= 2.35 on x86-64.
# glibc declares them SIMD-callable only under -ffast-math; declaring them here
# lets `#pragma omp simd` loops call e.g. _ZGVeN16v_tanhf, 16 floats at a time.
LIBMVEC = ("acos acosh asin asinh atan atanh cbrt cos cosh erf erfc exp exp10 exp2 expm1 "
           "log log10 log1p log2 sin sinh tan tanh").split()
LIBMVEC2 = ("atan2", "hypot", "pow")


def _glibc_version() -> tuple:
    name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    if name != "glibc" or platform.machine() != "x86_64":
        return ()
    return tuple(int(part) for part in version.split(".")[:2])


def vector_math_declarations() -> str:
    if _glibc_version() < (2, 35):
        return "// no vector math library known here: math calls stay scalar\n"
    lines = ['extern "C" {  // glibc libmvec: SIMD versions of these exist']
    for name in LIBMVEC + list(LIBMVEC2):
        args = "x, y" if name in LIBMVEC2 else "x"
        for ctype, suffix in (("float", "f"), ("double", "")):
            params = ", ".join(f"{ctype} {a}" for a in args.split(", "))
            lines.append(f"#pragma omp declare simd notinbranch\n{ctype} {name}{suffix}({params});")
    return "\n".join(lines) + "\n}\n"


# =============================================================================
# Source: library_source (prelude + one extern "C" function per kernel)
# =============================================================================

PRELUDE = r"""// Generated by dezero's cpu backend: fused elementwise kernels of one graph.
#include <cmath>
#include <cstdint>
#include <omp.h>
%(vector_math)s
namespace dezero_kernels {
using namespace std;  // tanh(x) on a float calls the float overload, not the double one
typedef intptr_t npy_intp;

// fmax/fmin as comparisons (the libm calls do not vectorise); a NaN argument
// yields the other one, as C's fmax does.
template <class T> inline T max_num(T a, T b) { return (a > b || b != b) ? a : b; }
template <class T> inline T min_num(T a, T b) { return (a < b || b != b) ? a : b; }
template <class A, class B> inline auto fmax(A a, B b) -> decltype(a + b) {
  return max_num<decltype(a + b)>(a, b); }
template <class A, class B> inline auto fmin(A a, B b) -> decltype(a + b) {
  return min_num<decltype(a + b)>(a, b); }

// The heads of a CPython object, a numpy array and a numpy dtype: numpy's stable
// ABI (PyArrayObject_fields, PyArray_Descr), read without Python's or numpy's
// headers. dezero_layout() lets the Python side check them once per process.
struct Object { intptr_t refcnt; void* type; };
struct Descr { Object head; void* typeobj; char kind, type, byteorder, flags; int type_num; };
struct Array {
  Object head; char* data; int nd; npy_intp* dims; npy_intp* strides; Object* base;
  Descr* descr; int flags;
};
enum { C_CONTIGUOUS = 0x1, ALIGNED = 0x100 };
static void* ndarray_type = nullptr;  // numpy.ndarray, set by dezero_init
// 0 in a child process forked after OpenMP ran: GNU OpenMP's threads did not
// survive the fork, and a parallel region there would wait for them forever.
static int threads_ok = 1;

// How an argument meets a kernel: -1 refused (the Python side converts it or
// explains), else its strides in elements broadcast to `shape` (0 on broadcast
// axes) and whether it is C-contiguous of the full shape (1) or one element (2).
static int arg_layout(Object* o, int type_num, npy_intp item, int nd,
                      const npy_intp* shape, npy_intp* st) {
  if (o->type != ndarray_type) return -1;
  const Array* a = (const Array*)o;
  if (a->descr->type_num != type_num || a->descr->byteorder == '>' ||
      !(a->flags & ALIGNED) || a->nd > nd) return -1;
  const int lead = nd - a->nd;
  bool full = true, one = true;
  for (int k = 0; k < nd; ++k) {
    const npy_intp dim = k < lead ? 1 : a->dims[k - lead];
    if (dim != shape[k] && dim != 1) return -1;
    full = full && dim == shape[k];
    one = one && dim == 1;
    st[k] = dim == 1 ? 0 : a->strides[k - lead] / item;
  }
  return one ? 2 : (full && (a->flags & C_CONTIGUOUS)) ? 1 : 0;
}

// [lo, hi) of n for this OpenMP thread, in blocks of 64 elements.
static inline void thread_range(npy_intp n, npy_intp* lo, npy_intp* hi) {
  const npy_intp parts = omp_get_num_threads(), me = omp_get_thread_num();
  const npy_intp chunk = ((n + parts - 1) / parts + 63) / 64 * 64;
  *lo = me * chunk < n ? me * chunk : n;
  *hi = *lo + chunk < n ? *lo + chunk : n;
}
}  // namespace dezero_kernels

extern "C" void dezero_init(dezero_kernels::Object* ndarray) {
  dezero_kernels::ndarray_type = ndarray;
}

extern "C" void dezero_serial() { dezero_kernels::threads_ok = 0; }

// What this library reads from an array: data, ndim, dims[0], type_num, flags.
extern "C" void dezero_layout(dezero_kernels::Object* o, intptr_t* out) {
  const dezero_kernels::Array* a = (const dezero_kernels::Array*)o;
  out[0] = (intptr_t)a->data; out[1] = a->nd; out[2] = a->dims[0];
  out[3] = a->strides[0]; out[4] = a->descr->type_num; out[5] = a->flags;
}
"""


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def kernel_source(spec) -> str:
    """The C++ of one kernel: `int <name>(inputs..., outputs...)` on numpy arrays;
    0 when done, k + 1 when input k must be converted first."""
    ins, outs, nd = spec.inputs, spec.outputs, len(spec.shape)
    n, params = _size(spec.shape), list(ins) + list(outs)
    dims = ", ".join(str(d) for d in spec.shape) or "1"
    # Fast loop: inputs of one element are read once, full ones indexed by i.
    # Strided loop: rows of the last axis, every input at its broadcast strides;
    # when each row is contiguous in every input (a bias row, a scalar), a copy of
    # it that indexes by i, which GCC vectorises (a runtime stride it does not).
    fast_loads, strided_loads, fast_args, row_args, row_loads, unit = [], [], [], [], [], []
    for k, p in enumerate(ins):
        if p.name in (q.name for q in ins[:k]):
            continue  # one value passed twice: read it once
        ptr = f"(const {p.ctype}*)_ptr[{k}]"
        if _size(p.shape) == 1 and n != 1:
            fast_args.append(f"      const {p.ctype} {p.name} = *{ptr};")
            row_args.append(f"    const {p.ctype} {p.name} = *{ptr};")
            unit.append(f"_kind[{k}] == 2")
        else:
            fast_args.append(f"      const {p.ctype}* __restrict _in{k} = {ptr};")
            fast_loads.append(f"        const {p.ctype} {p.name} = _in{k}[_i];")
            row_loads.append(f"        const {p.ctype} {p.name} = ({ptr} + _off[{k}])[_i];")
            unit.append(f"_st[{k}][{max(nd - 1, 0)}] == 1")
        strided_loads.append(f"        const {p.ctype} {p.name} = "
                             f"({ptr} + _off[{k}])[_i * _st[{k}][{max(nd - 1, 0)}]];")
    out_ptrs = [f"      {p.ctype}* __restrict _out{j} = ({p.ctype}*)_ptr[{len(ins) + j}];"
                for j, p in enumerate(outs)]
    declare = [f"        {p.ctype} {p.name};" for p in outs]
    body = ["        " + line for line in spec.body.strip().splitlines()]
    store = [f"        _out{j}[_base + _i] = {p.name};" for j, p in enumerate(outs)]
    expected = [tuple(p.shape) == tuple(spec.shape) for p in ins]
    fast_ok = " && ".join(f"_kind[{k}] == {2 if _size(p.shape) == 1 else 1}"
                          for k, (p, full) in enumerate(zip(ins, expected))
                          if _size(p.shape) == 1 or full)
    if not all(_size(p.shape) == 1 or full for p, full in zip(ins, expected)):
        fast_ok = "false"  # an input broadcasts along some axes: always strided
    checks = "\n".join(
        f"  if ((_kind[{k}] = arg_layout(_arg[{k}], {np.dtype(p.dtype).num}, "
        f"sizeof({p.ctype}), {nd}, _shape, _st[{k}])) < 0) return {k + 1};"
        for k, p in enumerate(ins))
    signature = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in ins) + " -> " + \
        ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in outs)
    n_in = max(len(ins), 1)
    return f"""
// kernel {spec.name}: {signature}
extern "C" int {spec.name}({", ".join(f"Object* _a{k}" for k in range(len(params)))}) {{
  static const npy_intp _shape[{max(nd, 1)}] = {{{dims}}};
  const npy_intp _n = {n}, _inner = {spec.shape[-1] if nd else 1};
  Object* _arg[] = {{{", ".join(f"_a{k}" for k in range(len(params)))}}};
  char* _ptr[{len(params)}];
  npy_intp _st[{n_in}][{max(nd, 1)}] = {{}};
  int _kind[{n_in}] = {{}};
{checks}
  if (_n == 0) return 0;
  for (int _k = 0; _k < {len(params)}; ++_k) _ptr[_k] = ((Array*)_arg[_k])->data;
  if ({fast_ok or "true"}) {{
    #pragma omp parallel if (_n >= {PARALLEL_MIN} && threads_ok)
    {{
      npy_intp _lo, _hi;
      thread_range(_n, &_lo, &_hi);
      const npy_intp _base = 0;
{chr(10).join(fast_args + out_ptrs)}
      #pragma omp simd
      for (npy_intp _i = _lo; _i < _hi; ++_i) {{
{chr(10).join(fast_loads + declare + body + store)}
      }}
    }}
    return 0;
  }}
  const bool _unit = {" && ".join(unit) or "true"};
  #pragma omp parallel for if (_n >= {PARALLEL_MIN} && _n > _inner && threads_ok)
  for (npy_intp _row = 0; _row < _n / _inner; ++_row) {{
    npy_intp _off[{n_in}] = {{}};
    for (int _k = 0; _k < {len(ins)}; ++_k) {{
      for (npy_intp _d = {nd - 2}, _rest = _row; _d >= 0; _rest /= _shape[_d], --_d)
        _off[_k] += (_rest % _shape[_d]) * _st[_k][_d];
    }}
    const npy_intp _base = _row * _inner;
{chr(10).join(out_ptrs)}
    if (_unit) {{
{chr(10).join(row_args)}
      #pragma omp simd
      for (npy_intp _i = 0; _i < _inner; ++_i) {{
{chr(10).join(row_loads + declare + body + store)}
      }}
      continue;
    }}
    #pragma omp simd
    for (npy_intp _i = 0; _i < _inner; ++_i) {{
{chr(10).join(strided_loads + declare + body + store)}
    }}
  }}
  return 0;
}}
"""


def library_source(specs) -> str:
    # Inside the namespace, fmax and fmin mean the prelude's own.
    return (PRELUDE % {"vector_math": vector_math_declarations()}
            + "namespace dezero_kernels {\n" + "".join(kernel_source(s) for s in specs)
            + "}  // namespace dezero_kernels\n")


# =============================================================================
# Building: build_library (compile once, cache on disk, rename into place)
# =============================================================================


def _cache_key(source: str) -> str:
    command, version = compiler()
    parts = [source, " ".join(FLAGS), " ".join(command), version, sys.version, np.__version__,
             _cpu_identity()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def build_library(source: str) -> Path:
    """The shared library for `source`: from the cache, or compiled into it. The
    library is written under a temporary name and renamed, so a process that
    finds it finds it whole, and two processes compiling at once both succeed.
    Its sha256 is kept beside it: a library cut short or damaged on disk (loading
    one kills the process with SIGBUS) does not match and is compiled again."""
    folder = cache_dir()
    target = folder / f"{_cache_key(source)[:32]}.so"
    digest = target.with_suffix(".sha256")
    if target.exists() and digest.exists() and digest.read_text() == _file_sha256(target):
        return target
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
        src, lib = Path(tmp, "kernels.cpp"), Path(tmp, "kernels.so")
        src.write_text(source)
        command = [*compiler()[0], *FLAGS, str(src), "-o", str(lib)]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0 or not lib.exists():
            numbered = "\n".join(f"{i:4d}  {line}"
                                 for i, line in enumerate(source.splitlines(), 1))
            verdict = "refused" if run.returncode else "wrote no library for"
            raise CompileError(f"the C++ compiler {verdict} the generated kernels\n"
                               f"  command: {' '.join(command)}\n{run.stderr}\n"
                               f"  source ({src.name}):\n{numbered}")
        os.replace(src, target.with_suffix(".cpp"))  # kept beside it, for reading
        Path(tmp, "sha256").write_text(_file_sha256(lib))
        os.replace(Path(tmp, "sha256"), digest)  # before the library: never a stale match
        os.replace(lib, target)
    return target


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# =============================================================================
# Buffers: BufferPool (outputs reused once nobody else holds them)
# =============================================================================


class BufferPool:
    """Output arrays for a graph's kernels, reused across replays: a list per
    (shape, dtype), of at most `per_key` arrays. A buffer is handed out again only
    when its list holds its only reference, so an array the caller received, stored
    into state or viewed (a view holds its base) is never written again. The check
    counts the checker's own reference too, so two threads never take one buffer."""

    def __init__(self, per_key: int = 8):
        self.per_key, self.lists = per_key, {}

    def buffers(self, shape: tuple, dtype) -> list:
        return self.lists.setdefault((tuple(shape), np.dtype(dtype)), [])

    def take(self, buffers: list, shape: tuple, dtype) -> np.ndarray:
        for buf in buffers:
            if sys.getrefcount(buf) == 3:  # the list, `buf` and getrefcount's argument
                return buf
        buf = np.empty(shape, dtype)
        if len(buffers) >= self.per_key:
            buffers.pop(0)  # the oldest, held elsewhere: forget it
        buffers.append(buf)
        return buf


# =============================================================================
# Library: KernelLibrary, kernel callables, compile_graph
# =============================================================================


class KernelLibrary:
    """The compiled kernels of one graph. `library.kernel(spec)` is the callable
    pycode's replay code calls: input arrays in, a tuple of output arrays out."""

    def __init__(self, specs):
        self.specs = {s.name: s for s in specs}
        self.source = library_source(specs)
        self.path = build_library(self.source)
        # Idle OpenMP threads sleep rather than spin (unless the user chose): spinning
        # threads steal the cores that numpy, BLAS and other processes need.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.dll = ctypes.CDLL(str(self.path))  # releases the GIL while a kernel runs
        init = self.dll.dezero_init
        init.argtypes, init.restype = [ctypes.py_object], None
        init(np.ndarray)
        _check_layout(self.dll)
        if _forked:  # the parent's OpenMP threads are gone, a new library's too
            self.dll.dezero_serial()
        _LOADED.append(self.dll)
        self.pool = BufferPool()

    def kernel(self, spec):
        compiled = self.specs.get(spec.name)
        if compiled is None or compiled.key() != spec.key():
            raise KeyError(f"kernel {spec.name} is not the one compiled into {self.path}")
        # A prototype called by address: ctypes calls it faster than the CDLL
        # attribute (1.7 against 3.0 us); it releases the GIL while the kernel runs.
        prototype = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.py_object] * (
            len(spec.inputs) + len(spec.outputs)))
        fn = prototype(ctypes.cast(getattr(self.dll, spec.name), ctypes.c_void_p).value)
        take = self.pool.take
        outs = [(self.pool.buffers(spec.shape, p.dtype), spec.shape, np.dtype(p.dtype))
                for p in spec.outputs]

        def run_kernel(*arrays):
            start = time.perf_counter() if debugging.LEVEL >= 2 else None
            results = []  # a list, so that take() sees the buffers taken already
            for buffers, shape, dtype in outs:
                results.append(take(buffers, shape, dtype))
            refused = fn(*arrays, *results)
            while refused:  # each pass conforms one more input
                arrays = _conform(spec, refused - 1, arrays)
                again = fn(*arrays, *results)
                if again == refused:
                    raise RuntimeError(f"kernel {spec.name} refused its conformed input "
                                       f"{spec.inputs[refused - 1].name}")
                refused = again
            if start is not None:
                ms = (time.perf_counter() - start) * 1e3
                moved = sum(getattr(a, "nbytes", 8) for a in (*arrays, *results))
                debugging.log(2, f"  kernel {spec.name}: {ms:.3f} ms, {moved} bytes in/out")
            return tuple(results)
        run_kernel.__name__ = run_kernel.__qualname__ = f"kernel_{spec.name}"
        return run_kernel


_layout_checked = False
_LOADED: list = []  # every library loaded in this process


_forked = False  # in a child forked after kernels were loaded: run them serially


def _serial_after_fork() -> None:
    global _forked
    _forked = _forked or bool(_LOADED)
    for dll in _LOADED:
        dll.dezero_serial()


os.register_at_fork(after_in_child=_serial_after_fork)


def _check_layout(dll) -> None:
    """Once per process: the array fields the kernels read are where numpy has them."""
    global _layout_checked
    if _layout_checked:
        return
    probe = np.zeros((3, 2), np.float32)[::-1]
    fields = (ctypes.c_ssize_t * 6)()
    dll.dezero_layout.argtypes = [ctypes.py_object, ctypes.c_void_p]
    dll.dezero_layout(probe, fields)
    want = [probe.ctypes.data, 2, 3, probe.strides[0], probe.dtype.num]
    if list(fields[:5]) != want or bool(fields[5] & 0x1) != probe.flags.c_contiguous:
        raise RuntimeError(f"the cpu backend's kernels cannot read numpy {np.__version__}'s "
                           f"arrays (read {list(fields)}, expected {want}); use the python "
                           f"backend: graph.compile('python') or DEZERO_BACKEND=python")
    _layout_checked = True


def _conform(spec, k: int, arrays: tuple) -> tuple:
    """`arrays` with input k as the kernel needs it (an aligned, native-order
    ndarray of its dtype), or an error naming the kernel, input and fix."""
    p, x = spec.inputs[k], arrays[k]
    if not isinstance(x, np.ndarray) and hasattr(x, "__array__") and \
            type(x).__module__.startswith("cupy"):
        raise TypeError(f"kernel {spec.name}: input {p.name} is a cupy array; the cpu "
                        f"backend runs numpy arrays (use the cupy backend on a GPU)")
    if not isinstance(x, np.ndarray):
        x = np.asarray(x, dtype=p.dtype)  # a Python number takes the kernel's dtype
    elif not np.can_cast(x.dtype, p.dtype, "equiv"):
        raise TypeError(f"kernel {spec.name}: input {p.name} is {x.dtype}, the kernel was "
                        f"compiled for {p.dtype}; retrace with inputs of that dtype")
    try:
        np.broadcast_shapes(x.shape, spec.shape)
    except ValueError:
        raise ValueError(f"kernel {spec.name}: input {p.name} has shape {x.shape}, which "
                         f"does not broadcast to the kernel's shape {spec.shape}") from None
    if x.ndim > len(spec.shape):
        x = x.reshape(x.shape[x.ndim - len(spec.shape):])  # leading axes of size 1
    fixed = np.array(x, dtype=np.dtype(p.dtype).newbyteorder("="), order="C")
    return arrays[:k] + (fixed,) + arrays[k + 1:]


@functools.cache
def _warn_unfused(reason: str) -> None:
    warnings.warn(f"dezero: fused kernels are off, graphs replay unfused (python backend): "
                  f"{reason}", RuntimeWarning, stacklevel=3)


# A kernel call costs about 2 us (ctypes, output buffers); numpy about 0.7 us an op
# on small arrays. A short group on small arrays runs faster as numpy calls.
KERNEL_MIN_OPS, KERNEL_MIN_SIZE = 4, 1 << 14


def pays(group) -> bool:
    """Whether running `group` as one kernel beats calling numpy for each node."""
    return len(group.nodes) >= KERNEL_MIN_OPS or _size(group.shape) >= KERNEL_MIN_SIZE


def compile_graph(graph) -> pycode.Compiled:
    """The replay code of `graph` with its groups run as compiled kernels (those
    that pay, see pays())."""
    groups = [g for g in getattr(graph, "groups", []) if pays(g)]
    if debugging.LEVEL >= 3:
        for g in getattr(graph, "groups", []):
            if not pays(g):
                debugging.log(3, f"kernel {g.name} runs as numpy calls: {len(g.nodes)} ops "
                                 f"on {_size(g.shape)} elements cost less than a kernel call")
    if not groups or graph.device == "gpu":  # the cupy backend fuses on the GPU
        return pycode.Compiled(graph)
    from dezero.static.codegen import kernel_spec  # noqa: PLC0415 - codegen imports ir
    reason = missing_reason()
    if reason is not None:
        _warn_unfused(reason)
        return pycode.Compiled(graph)
    try:
        library = KernelLibrary([kernel_spec(g) for g in groups])
    except OSError as e:  # a read-only or misplaced cache folder; others propagate
        if not str(e.filename or "").startswith(str(cache_dir())):
            raise
        _warn_unfused(f"the kernel cache {cache_dir()} cannot be written ({e.strerror}); "
                      f"set DEZERO_CACHE_DIR to a writable folder")
        return pycode.Compiled(graph)
    plan = pycode.Compiled(graph, factory=library.kernel, groups=groups)
    plan.kernel_source, plan.library = library.source, library
    return plan
