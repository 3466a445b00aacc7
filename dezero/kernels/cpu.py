"""The "cpu" backend: a graph's fused groups as C++ kernels, the rest as replay code.

Registered in static/backends/__init__.py. Every kernel spec of a graph (codegen.py)
becomes one function, its body inside the loops that dezero_kernels.h (a header
beside this module) writes, and all of them are compiled with the system C++
compiler into ONE shared library, loaded with ctypes; pycode.py's replay code calls them
in place of the groups' nodes. Libraries are cached on disk by a sha256 of source,
header, flags, compiler, Python, numpy, C library and CPU, in DEZERO_CACHE_DIR (default
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from dezero.kernels import cache, cpu_reductions, measure, outputs, pending
from dezero.kernels.codegen import kernel_spec, per_sizes, size_array
from dezero.static import debugging
from dezero.static.backends import pycode
from dezero.static.lowering import lower
from dezero.static.sizes import Size, c_text, count, evaluator

# =============================================================================
# Toolchain: compiler, FLAGS
# =============================================================================

# No -ffast-math: inf and NaN keep their meaning. -ffp-contract=off: a * b + c is
# rounded twice, as numpy rounds it (an FMA would differ in the last bit).
# -fno-math-errno lets sqrt and the vector math library run without setting
# errno; -fno-trapping-math lets a select (where, relu's mask) compute both sides,
# which vectorises it (no value changes: only floating-point traps, which nothing
# here enables, could tell); -march=native is why the CPU's identity is part of the
# cache key.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fno-math-errno", "-fno-trapping-math",
         "-fopenmp", "-fPIC", "-shared", "-std=c++17")


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


@functools.cache
def _cpu_identity() -> str:
    """The CPU's feature flags (what -march=native compiles for)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        return re.search(r"^flags\s*:(.*)$", text, re.M).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or platform.machine()


# =============================================================================
# Source: kernel_source, library_source (the header, then one function per kernel)
# =============================================================================

# The declarations every library shares (vector math, numpy's array layout, the loops
# around a kernel's body): a header that ships with the package.
HEADER = Path(__file__).with_name("dezero_kernels.h")


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _is_one(shape) -> bool:
    return all(n == 1 for n in shape)  # (a symbolic size is 2 or more: fusion_refusal)


def spelled(spec):
    """size -> its C++ in a kernel of `spec`: an int, or an expression of _S, the
    array of the values of spec.sizes that a replay passes (KernelSpec.sizes)."""
    return lambda n: c_text(n, lambda name: f"_S[{spec.sizes.index(name)}]")


def _sizes_param(spec) -> str:
    return "const npy_intp* _S, " if spec.sizes else ""


def kernel_source(spec) -> str:
    """The C++ of one kernel: `int <name>(inputs..., outputs..., int _threads)` on
    numpy arrays and a thread count, its body once inside DEZERO_FOR_EACH_ELEMENT
    (dezero_kernels.h writes the loops); it returns 0 when done, k + 1 when input k
    must be converted first. A horizontal kernel calls its segments' functions
    (library_source writes them) in turn, on its thread count; a reduction kernel's
    source is cpu_reductions.reduction_source's."""
    if hasattr(spec, "axes"):
        return cpu_reductions.reduction_source(spec, spelled(spec), _sizes_param(spec))
    if spec.segments:
        return _horizontal_source(spec)
    ins, outs, nd = spec.inputs, spec.outputs, len(spec.shape)
    ctype, dtype = outs[0].ctype, np.dtype(outs[0].dtype)
    if any(p.ctype not in (ctype, "bool") for p in ins):  # a mask is read as bool
        raise ValueError(f"kernel {spec.name}: inputs of several dtypes "
                         f"({', '.join(sorted({p.dtype for p in ins}))}); a kernel reads one")
    # An input of one element is read once (unless the kernel has one element too);
    # the flat loop serves only kernels whose inputs are all of one or of all elements.
    one = [_is_one(p.shape) and not _is_one(spec.shape) for p in ins]
    fast = all(o or tuple(p.shape) == tuple(spec.shape) for o, p in zip(one, ins))
    loads, seen = [], set()
    for k, p in enumerate(ins):
        if p.name not in seen:  # one value passed twice: read it once
            seen.add(p.name)
            loads.append(f"{p.name} = IN({k})")
    signature = ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in ins) + " -> " + \
        ", ".join(f"{p.name}: {p.dtype}{list(p.shape)}" for p in outs)
    params = ", ".join(f"Object* _a{k}" for k in range(len(ins) + len(outs)))
    body = spec.body.strip().splitlines()
    if not body or not body[0].startswith("//"):
        body.insert(0, f"// kernel {spec.name}")
    return "\n".join([
        "", f"{body[0]}", f"// {signature}",
        f"extern \"C\" int {spec.name}({params}, {_sizes_param(spec)}int _threads) {{",
        f"  Object* _arg[] = {{{', '.join(f'_a{k}' for k in range(len(ins) + len(outs)))}}};",
        f"  {'' if spec.sizes else 'static '}const npy_intp _shape[] = "
        f"{{{', '.join(map(spelled(spec), spec.shape)) or '1'}}};",
        f"  static constexpr bool _one[] = {{{', '.join(str(int(o)) for o in one) or '0'}}}, "
        f"_bool[] = {{{', '.join(str(int(p.ctype == 'bool')) for p in ins) or '0'}}};"
        f"  // read once; a mask",
        f"  DEZERO_FOR_EACH_ELEMENT({ctype}, {dtype.num}, {nd}, {len(ins)}, "
        f"{len(outs)}, {str(fast).lower()},",
        f"    const {ctype} {', '.join(loads)};",
        *(f"    {ctype} {p.name};" for p in outs),
        *(f"    {line}" for line in body[1:]),
        *(f"    OUT({p.ctype}, {j}) = {p.name};" for j, p in enumerate(outs)),
        "  )", "}", ""])


def _horizontal_source(spec) -> str:
    """One function for a horizontal kernel: its arguments are all segments' inputs,
    then their outputs; it runs each segment's loop on its share of them, and a
    segment's refused input k is told as that input's place among all."""
    at: dict = {}
    for k, p in enumerate(spec.inputs + spec.outputs):
        at.setdefault(p.name, k)
    params = ", ".join(f"Object* _a{k}" for k in range(len(spec.inputs + spec.outputs)))
    lines = ["", spec.body.strip(), f"extern \"C\" int {spec.name}({params}, int _threads) {{"]
    for j, part in enumerate(spec.segments):
        args = ", ".join(f"_a{at[p.name]}" for p in part.inputs + part.outputs)
        places = ", ".join(str(at[p.name]) for p in part.inputs) or "0"
        lines += [f"  static const int _in{j}[] = {{{places}}};  // {part.name}'s inputs",
                  f"  if (const int _r = {part.name}({args}, _threads)) "
                  f"return _in{j}[_r - 1] + 1;"]
    return "\n".join(lines + ["  return 0;", "}", ""])


def library_source(specs) -> str:
    """The header, then each kernel; a kernel that computes what an earlier one does
    (the same loop up to names: an unrolled RNN's steps, same-shaped parameters'
    updates) is a one-line call of it, so the compiler sees each loop once."""
    parts, first = [], {}
    for spec in (s for top in specs for s in (*top.segments, top)):
        source, loop = _loop(spec)
        same = first.setdefault(loop, spec.name)
        if same != spec.name:
            args = ", ".join(f"_a{k}" for k in range(len(spec.inputs) + len(spec.outputs)))
            source = (f"\n// kernel {spec.name}: the loop of {same}\nextern \"C\" int "
                      f"{spec.name}({', '.join('Object* ' + a for a in args.split(', '))}, "
                      f"{_sizes_param(spec)}int _threads) {{ return {same}({args}, "
                      f"{'_S, ' if spec.sizes else ''}_threads); }}\n")
        parts.append(source)
    parts += [_entry(top) for top in specs]
    # Inside the namespace, fmax and fmin mean the header's own.
    return ("// Generated by dezero's cpu backend: fused elementwise kernels of one graph.\n"
            f'#include "{HEADER.name}"\n\nnamespace dezero_kernels {{\n'
            + "".join(parts) + "}  // namespace dezero_kernels\n")


def _entry(spec) -> str:
    """`<name>_call`: the kernel as a builtin function of Python (the header's
    call_entry), on its arrays, inputs then outputs, of which it checks the outputs;
    then, where its shapes hold symbolic sizes, the array of their values (an array
    of another length or type is refused as a wrong number of arrays)."""
    n_in, n = len(spec.inputs), len(spec.inputs) + len(spec.outputs)
    types = ", ".join(str(np.dtype(p.dtype).num) for p in spec.outputs)
    sizes = ", ".join(spelled(spec)(count(p.shape)) for p in spec.outputs)
    head = (f'extern "C" Object* {spec.name}_call(Object* _self, Object* const* _a, npy_intp '
            f"_n) {{\n  static const int _types[] = {{{types}}};")
    args = "".join(f"_a[{k}], " for k in range(n))
    if not spec.sizes:
        return (f"\nstatic int {spec.name}_on(Object* const* _a, int _threads) {{ return "
                f"{spec.name}({args}_threads); }}\n{head} static const npy_intp _sizes[] = "
                f"{{{sizes}}};\n  return call_entry(_self, _a, _n, {n_in}, {n - n_in}, _types, "
                f"_sizes, {spec.name}_on); }}\n")
    return (f"\nstatic int {spec.name}_on(Object* const* _a, int _threads) {{ return "
            f"{spec.name}({args}(const npy_intp*)((Array*)_a[{n}])->data, _threads); }}\n"
            f"{head}\n  const npy_intp* _S = _n == {n + 1} ? size_values(_a[{n}], "
            f"{np.dtype(np.intp).num}, {len(spec.sizes)}) : nullptr;\n"
            f"  if (!_S) return call_entry(_self, _a, -1, {n_in}, {n - n_in}, _types, nullptr, "
            f"{spec.name}_on);\n  const npy_intp _sizes[] = {{{sizes}}};\n"
            f"  return call_entry(_self, _a, {n}, {n_in}, {n - n_in}, _types, _sizes, "
            f"{spec.name}_on); }}\n")


# Words of a kernel's C++ that are not names of values (calls are kept anyway).
_CPP_WORDS = frozenset("const float double bool int true false static constexpr extern "
                       "return Object npy_intp".split())


@functools.lru_cache(maxsize=4096)  # split and library_source both ask, for every kernel
def _loop(spec) -> tuple:
    """(kernel_source(spec), its _numbered form)."""
    source = kernel_source(spec)
    return source, _numbered(source, spec.name)


def _numbered(source: str, name: str) -> str:
    """A kernel's source without its comments and name, its values numbered in order
    of appearance: equal for two kernels exactly when they compute the same."""
    names: dict = {}

    def number(word):
        word = word.group(0)
        # _acc_<value> and _col_acc_<value>: accumulators named after their values
        return word if word in _CPP_WORDS or word.startswith("_") and "_acc_" not in \
            word else names.setdefault(word, f"v{len(names)}")
    text = "\n".join(line.split("//")[0] for line in source.splitlines())  # comments too
    return re.sub(r"\b[A-Za-z_]\w*\b(?!\s*\()", number, text.replace(f" {name}(", " _k("))


# =============================================================================
# Building: build_library (compile once, cache on disk, rename into place)
# =============================================================================


def _cache_key(source: str) -> str:
    command, version = compiler()
    # The header's text and the C library's version (which vector math it declares):
    # the library depends on them as much as on its own source.
    parts = [source, HEADER.read_text(), " ".join(FLAGS), " ".join(command), version,
             sys.version, np.__version__, _cpu_identity(),
             " ".join(platform.libc_ver())]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def cached_library(source: str, folder: Path | None = None) -> tuple[Path, bool]:
    """(where the library for `source` lives in the cache, whether it is there whole).
    Its sha256 is kept beside it: a library cut short or damaged on disk (loading
    one kills the process with SIGBUS) does not match. A folder that others could
    write is refused (cache.CacheError). folder: cache.folder() if None."""
    target = cache.private_folder(folder or cache.folder()) / f"{_cache_key(source)[:32]}.so"
    digest = target.with_suffix(".sha256")
    return target, target.exists() and digest.exists() and \
        digest.read_text() == _file_sha256(target)


# A graph of more distinct loops than this compiles as several libraries, side by
# side on the machine's cores (g++ takes about 0.1 s of CPU a loop).
LOOPS_PER_LIBRARY = 24


def split(specs) -> list[list]:
    """specs as the kernels of several libraries of at most LOOPS_PER_LIBRARY distinct
    loops each, the copies of a loop (see library_source) with it."""
    loops: dict = {}
    for spec in specs:
        loops.setdefault(_loop(spec)[1], []).append(spec)
    loops = list(loops.values())
    return [sum(loops[i:i + LOOPS_PER_LIBRARY], [])
            for i in range(0, len(loops), LOOPS_PER_LIBRARY)]


def build_libraries(sources: list, folder: Path | None = None) -> list[Path]:
    """build_library of each source, as many at once as the machine has cores."""
    with ThreadPoolExecutor(min(len(sources), os.cpu_count() or 1)) as pool:
        return list(pool.map(build_library, sources, [folder] * len(sources)))


def build_library(source: str, folder: Path | None = None) -> Path:
    """The shared library for `source`: from the cache, or compiled into it. The
    library is written under a temporary name and renamed, so a process that
    finds it finds it whole, and two processes compiling at once both succeed."""
    target, whole = cached_library(source, folder)
    if whole:
        return target
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        src, lib = Path(tmp, "kernels.cpp"), Path(tmp, "kernels.so")
        src.write_text(source)
        command = [*compiler()[0], *FLAGS, f"-I{HEADER.parent}", str(src), "-o", str(lib)]
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
        os.replace(Path(tmp, "sha256"), target.with_suffix(".sha256"))  # first: never stale
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

    def __init__(self, specs, source: str | None = None, path: Path | None = None):
        """source: library_source(specs) when known; path: the library built from it,
        else it is built (or found in the cache) now."""
        self.specs = {s.name: s for s in specs}
        self.loops = {s.name: _loop(s)[1] for s in specs}  # equal: the same computation
        self.source = source or library_source(specs)
        self.path = path or build_library(self.source)
        # Idle OpenMP threads sleep rather than spin (unless the user chose): spinning
        # threads steal the cores that numpy, BLAS and other processes need.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            self.dll = ctypes.CDLL(str(self.path))  # releases the GIL while a kernel runs
        except OSError as e:  # a noexec mount: "failed to map segment from shared object"
            raise cache.CacheError(
                f"libraries in the kernel cache {self.path.parent} cannot be loaded "
                f"({str(e).replace(str(self.path) + ': ', '')}; a folder on a noexec mount "
                f"cannot hold them); set DEZERO_CACHE_DIR to a folder on another mount") from e
        init = self.dll.dezero_init
        init.argtypes, init.restype = [ctypes.py_object, *[ctypes.c_void_p] * 3, ctypes.c_int], None
        init(np.ndarray, *(ctypes.cast(getattr(ctypes.pythonapi, name), ctypes.c_void_p) for name
                           in ("Py_IncRef", "PyEval_SaveThread", "PyEval_RestoreThread")),
             tuple.__basicsize__)
        _check_layout(self.dll)
        if _forked:  # the parent's OpenMP threads are gone, a new library's too
            self.dll.dezero_serial()
        _LOADED.append(self.dll)
        self.pool = BufferPool()
        self.threads: dict = {}  # kernel name -> threads to run on (measure.decide)

    def kernel(self, spec, threads: int | None = None, numpy=None):
        """threads: how many the kernel runs on; by default what measure.decide chose
        for it (library.threads), else all the machine's for 2**18 elements or more.
        numpy: () -> the group's numpy calls, which a reduction kernel runs instead on
        inputs that numpy adds in another order (cpu_reductions.reduction_call)."""
        if self.specs.get(spec.name) != spec:
            raise KeyError(f"kernel {spec.name} is not the one compiled into {self.path}")
        if threads is None:
            elements = count(spec.shape)  # (a symbolic count: measure.decide's choice)
            threads = self.threads.get(spec.name, measure.machine_threads() if not
                                       isinstance(elements, Size) and elements >= 1 << 18 else 1)
        call = self._builtin(spec, threads)
        if hasattr(spec, "axes"):
            return cpu_reductions.reduction_call(spec, call, threads, numpy)
        take, n_in, pool = self.pool.take, len(spec.inputs), self.pool
        shapes_at = evaluator((tuple(spec.shape), tuple(p.shape for p in spec.outputs)),
                              spec.sizes)

        def outputs_at(sizes: tuple) -> tuple:
            """Where the symbolic sizes are `sizes`: the kernel's shape, (buffers, shape,
            dtype) of each output (a horizontal kernel's: its segments'), and the
            arguments after the outputs (the intp array of the sizes)."""
            shape, shapes = shapes_at(sizes)
            return shape, [(pool.buffers(s, p.dtype), s, np.dtype(p.dtype)) for s, p in
                           zip(shapes, spec.outputs)], size_array(spec, sizes)
        at = per_sizes(spec, outputs_at)

        def run_kernel(*arrays, out=None, sizes=()):
            """out: per output, an array to write it into (lowering._into) or None for
            a buffer; the kernel writes into it only where nobody else holds it.
            sizes: the values of spec.sizes, a tuple of ints (symbolic sizes only)."""
            start = time.perf_counter() if debugging.LEVEL >= 2 else None
            shape, outs, extra = at(sizes)
            # A list, so that take() sees the buffers taken already.
            results = [take(*o) for o in outs] if out is None else [
                take(*o) if g is None else g for g, o in zip(out, outs)]
            refused = call(*arrays, *results, *extra)
            while refused:  # each pass conforms one more input, or gives an output a new array
                if refused > n_in:  # someone else holds it, or it views other memory
                    j = refused - n_in - 1  # (a new array, not the pool's: a state keeps it)
                    results[j] = np.empty(outs[j][1], outs[j][2])
                elif refused < 0:
                    raise TypeError(f"kernel {spec.name} takes {n_in} input arrays, "
                                    f"{len(arrays)} were given")
                else:
                    arrays = _conform(spec, refused - 1, arrays, shape if spec.sizes else None)
                again = call(*arrays, *results, *extra)
                if again == refused:
                    name = (*spec.inputs, *spec.outputs)[refused - 1].name
                    raise RuntimeError(f"kernel {spec.name} refused {name} again, as given")
                refused = again
            if start is not None:
                ms = (time.perf_counter() - start) * 1e3
                moved = sum(getattr(a, "nbytes", 8) for a in (*arrays, *results))
                debugging.log(2, f"  kernel {spec.name}: {ms:.3f} ms, {moved} bytes in/out")
            return tuple(results)
        run_kernel.__name__ = run_kernel.__qualname__ = f"kernel_{spec.name}"
        run_kernel.threads = threads
        return run_kernel

    def _builtin(self, spec, threads: int):
        """The kernel's `<name>_call` as a builtin function of Python: called as one, it
        costs about a tenth of a ctypes call. It releases the GIL while a kernel of
        2**14 elements or more, or on several threads, runs, unless it writes over an
        input (which no other thread may take meanwhile); an output may have the
        references the replay holds (outputs.REPLAY_REFS, less the check's own, plus
        run_kernel's list and the call's arguments, which name it twice)."""
        address = ctypes.cast(getattr(self.dll, f"{spec.name}_call"), ctypes.c_void_p).value
        method = _MethodDef(spec.name.encode(), address, 0x80, None)  # 0x80: METH_FASTCALL
        elements = count(spec.shape)
        params = np.array([threads, threads > 1 or isinstance(elements, Size) or
                           elements >= 1 << 14,
                           outputs.REPLAY_REFS + 2], np.intp)
        codes = range(-3, len(spec.inputs) + len(spec.outputs) + 1)
        return _new_builtin(ctypes.addressof(method), (params, method, *codes), None)


class _MethodDef(ctypes.Structure):
    """CPython's PyMethodDef: a builtin function's name, C function, kind and doc."""
    _fields_ = [("name", ctypes.c_char_p), ("function", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("doc", ctypes.c_char_p)]


# PyCFunction_NewEx(definition, self, module): a builtin function.
_new_builtin = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object,
                                 ctypes.py_object)(("PyCFunction_NewEx", ctypes.pythonapi))


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
    fields = (ctypes.c_ssize_t * 7)()
    dll.dezero_layout.argtypes = [ctypes.py_object, ctypes.c_void_p]
    dll.dezero_layout(probe, fields)
    want = [probe.ctypes.data, 2, 3, probe.strides[0], probe.dtype.num]
    flags = [bool(fields[5] & bit) for bit in (0x1, 0x100, 0x400)]
    if list(fields[:5]) != want or fields[6] != id(probe.base) or flags != [
            probe.flags.c_contiguous, probe.flags.aligned, probe.flags.writeable]:
        raise RuntimeError(f"the cpu backend's kernels cannot read numpy {np.__version__}'s "
                           f"arrays (read {list(fields)}, expected {want}); use the python "
                           f"backend: graph.compile('python') or DEZERO_BACKEND=python")
    _layout_checked = True


def _conform(spec, k: int, arrays: tuple, shape=None) -> tuple:
    """`arrays` with input k as the kernel needs it (an aligned, native-order
    ndarray of its dtype), or an error naming the kernel, input and fix. shape: the
    kernel's at this call's sizes (by default spec.shape_of the input)."""
    p, x = spec.inputs[k], arrays[k]
    if x is None:  # (np.asarray(None, float32) is NaN: a state set to None since)
        raise TypeError(f"kernel {spec.name}: input {p.name} is None")
    if not isinstance(x, np.ndarray) and hasattr(x, "__array__") and \
            type(x).__module__.startswith("cupy"):
        raise TypeError(f"kernel {spec.name}: input {p.name} is a cupy array; the cpu "
                        f"backend runs numpy arrays (use the cupy backend on a GPU)")
    if not isinstance(x, np.ndarray):
        x = np.asarray(x, dtype=p.dtype)  # a Python number takes the kernel's dtype
    elif not np.can_cast(x.dtype, p.dtype, "equiv"):
        raise TypeError(f"kernel {spec.name}: input {p.name} is {x.dtype}, the kernel was "
                        f"compiled for {p.dtype}; retrace with inputs of that dtype")
    shape = spec.shape_of(p) if shape is None else shape
    try:
        np.broadcast_shapes(x.shape, shape)
    except ValueError:
        raise ValueError(f"kernel {spec.name}: input {p.name} has shape {x.shape}, which "
                         f"does not broadcast to the kernel's shape {shape}") from None
    if x.ndim > len(shape):
        x = x.reshape(x.shape[x.ndim - len(shape):])  # leading axes of size 1
    fixed = np.array(x, dtype=np.dtype(p.dtype).newbyteorder("="), order="C")
    return arrays[:k] + (fixed,) + arrays[k + 1:]


@functools.cache
def _warn_unfused(reason: str) -> None:
    warnings.warn(f"dezero: fused kernels are off, graphs replay unfused (python backend): "
                  f"{reason}", RuntimeWarning, stacklevel=3)


def numpy_calls(graph):
    """name -> the numpy calls of the graph's kernel of that name (pycode.group_function),
    made when first asked for: what a kernel runs on inputs it cannot take."""
    @functools.cache
    def calls(name):
        step, = (s for s in lower(graph).steps if s.kind == "kernel" and s.group.name == name)
        return pycode.group_function(step)
    return calls


_UNUSABLE: dict = {}  # cache folder -> why its libraries cannot be used


def compile_graph(graph):
    """The replay code of `graph` with its groups run as compiled kernels (all of
    them, unless DEZERO_KERNELS=never; measure.py then times each against its numpy
    calls, which run instead where faster, and print(graph) shows it): at once
    when the library is in the cache, else a pending.Pending plan that replays
    unfused while the library compiles. A graph of many distinct loops has several
    libraries (split), compiled side by side: plan.libraries (plan.library if one)."""
    groups = [g for g in getattr(graph, "groups", []) if g.compiled]
    if not groups or graph.device == "gpu":  # the cupy backend fuses on the GPU
        return pycode.Compiled(graph)
    reason = missing_reason() or _UNUSABLE.get(cache.folder())
    if reason is not None:
        _warn_unfused(reason)
        return pycode.Compiled(graph)
    parts = split([kernel_spec(g) for g in groups])
    for group in groups if debugging.LEVEL >= 4 else ():  # what a learner reads of each
        source = kernel_source(group.spec).lstrip()
        debugging.log(4, f"kernel {group.name} of {graph.name}:\n{source}")
    sources = [library_source(part) for part in parts]

    def fused(library_paths):
        """The fused plan, given a function that returns the libraries' paths (or
        raises why there are none); the unfused plan, with one warning, when the
        cache cannot hold or load libraries."""
        try:
            libraries = [KernelLibrary(part, source, path)
                         for part, source, path in zip(parts, sources, library_paths())]
        except cache.CacheError as e:  # refused, or on a noexec mount: not compiled again
            _UNUSABLE[cache.folder()] = str(e)
            _warn_unfused(str(e))
            return pycode.Compiled(graph)
        except OSError as e:  # a read-only or misplaced cache folder; others propagate
            if not str(e.filename or "").startswith(str(cache.folder())):
                raise
            _warn_unfused(f"the kernel cache {cache.folder()} cannot be written "
                          f"({e.strerror}); set DEZERO_CACHE_DIR to a writable folder")
            return pycode.Compiled(graph)
        holder = {name: library for library in libraries for name in library.specs}
        for library in libraries:  # sets each group's `compiled`, which the code reads
            measure.decide(library, graph)
        calls = numpy_calls(graph)
        plan = pycode.Compiled(graph, factory=lambda group: holder[group.name].kernel(
            group.spec, numpy=functools.partial(calls, group.name)))
        plan.kernel_source, plan.libraries = "".join(sources), libraries
        if len(libraries) == 1:  # the usual case, with its own name
            plan.library = libraries[0]
        return plan

    build = functools.partial(build_libraries, sources, cache.folder())  # the folder of now
    try:
        whole = all(cached_library(source)[1] for source in sources)
    except (cache.CacheError, OSError):
        whole = True  # build() fails the same way now, and fused() says why
    return fused(build) if whole else pending.Pending(pycode.Compiled(graph), build, fused)
