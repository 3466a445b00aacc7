"""The cpu backend's kernels (dezero/kernels/cpu.py) on specs written by
hand (codegen's Param and KernelSpec): broadcasting by strides, odd inputs, buffer
reuse that never overwrites what a caller holds, the disk cache, compile errors
and the missing-compiler fallback."""
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from backend_helpers import assert_within_ulps, product_scale

import dezero
import dezero.functions as F
from dezero.kernels import cache, cpu, pending
from dezero.kernels.codegen import CTYPES, KernelSpec, Param, kernel_spec
from dezero.static import backends, passes

pytestmark = pytest.mark.skipif(cpu.missing_reason() is not None,
                                reason=str(cpu.missing_reason()))



def spec(name, inputs, outputs, shape, body):
    """A KernelSpec written by hand, params given as (name, dtype, shape)."""
    def params(triples):
        return tuple(Param(n, CTYPES[dtype], dtype, tuple(s)) for n, dtype, s in triples)
    return KernelSpec(name, params(inputs), params(outputs), tuple(shape), body)


BODY = "const float t1 = x * a;\nconst float t2 = tanh(t1 + b);\ny = t2;\nz = fmax(t2, 0) * x;"


def reference(x, a, b):
    y = np.tanh(x * a + b)
    return y, np.maximum(y, 0) * x


SPECS = {
    "k_full": spec("k_full", [("x", "float32", (3, 4)), ("a", "float32", ()),
                              ("b", "float32", (3, 4))],
                   [("y", "float32", (3, 4)), ("z", "float32", (3, 4))], (3, 4), BODY),
    "k_row": spec("k_row", [("x", "float32", (3, 4)), ("a", "float32", (3, 1)),
                            ("b", "float32", (4,))],
                  [("y", "float32", (3, 4)), ("z", "float32", (3, 4))], (3, 4), BODY),
    "k_f64": spec("k_f64", [("x", "float64", (5,)), ("a", "float64", ())],
                  [("y", "float64", (5,)), ("m", "bool", (5,))], (5,),
                  "const double t = x * a;\ny = t - 1.0;\nm = (bool)(t > 0.0);"),
    "k_0d": spec("k_0d", [("x", "float32", ()), ("a", "float32", ())],
                 [("y", "float32", ())], (), "y = x * a + 1.0f;"),
    "k_big": spec("k_big", [("x", "float32", (600, 500)), ("b", "float32", (500,))],
                  [("y", "float32", (600, 500))], (600, 500), "y = exp(x) + b;"),
    "k_empty": spec("k_empty", [("x", "float32", (0, 3))], [("y", "float32", (0, 3))],
                    (0, 3), "y = x + 1.0f;"),
}


@pytest.fixture(scope="module")
def library():
    return cpu.KernelLibrary(list(SPECS.values()))


@pytest.fixture(scope="module")
def built_0d():
    """k_0d's library in the suite's kernel cache (compiled there once, kept
    between runs): the cache tests start from a copy of it rather than a compile."""
    return cpu.build_library(cpu.library_source([SPECS["k_0d"]]))


def copy_cache(library, folder):
    """Copies a library and its cache files (.sha256, .cpp; not the timings kept
    beside it) into `folder`."""
    for path in map(library.with_suffix, (".so", ".sha256", ".cpp")):
        shutil.copy2(path, folder / path.name)
    return folder / library.name


def kernel(library, name):
    return library.kernel(SPECS[name])


def randn(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- results against numpy ---------------------------------------------------


def test_contiguous_inputs_and_a_scalar_match_numpy(library):
    x, b = randn(3, 4), randn(3, 4, seed=1)
    a = np.array(0.7, np.float32)
    y, z = kernel(library, "k_full")(x, a, b)
    for got, want in zip((y, z), reference(x, a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert got.dtype == np.float32 and got.shape == (3, 4)


@pytest.mark.parametrize("layout", ["transposed", "sliced", "broadcast view", "row/column"])
def test_strided_and_broadcast_inputs_match_numpy(library, layout):
    x = randn(3, 4)
    a, b = np.array(0.7, np.float32), randn(3, 4, seed=1)
    name = "k_full"
    if layout == "transposed":
        x = np.ascontiguousarray(x.T).T
    elif layout == "sliced":
        x = randn(6, 8)[::2, 1::2]
    elif layout == "broadcast view":
        b = np.broadcast_to(randn(4, seed=2), (3, 4))
    else:
        name, a, b = "k_row", randn(3, 1, seed=3), randn(4, seed=4)
    y, z = kernel(library, name)(x, a, b)
    for got, want in zip((y, z), reference(x, a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_float64_and_bool_outputs(library):
    x = randn(5, dtype=np.float64)
    y, m = kernel(library, "k_f64")(x, np.array(2.0))
    np.testing.assert_array_equal(y, x * 2.0 - 1.0)
    assert m.dtype == np.bool_
    np.testing.assert_array_equal(m, x * 2.0 > 0)


def test_zero_dim_and_empty_kernels(library):
    y, = kernel(library, "k_0d")(np.array(2.0, np.float32), np.array(3.0, np.float32))
    assert y.shape == () and y == 7.0
    y, = kernel(library, "k_empty")(np.zeros((0, 3), np.float32))
    assert y.shape == (0, 3)


def test_large_kernel_runs_on_threads_and_matches(library):
    x, b = randn(600, 500), randn(500, seed=1)
    scale = np.exp(x) + np.abs(b)  # the C library's exp: a few ulp from numpy's
    y, = kernel(library, "k_big")(x, b)
    assert_within_ulps(y, np.exp(x) + b, scale)
    y, = kernel(library, "k_big")(np.asfortranarray(x), b)  # the strided loop
    assert_within_ulps(y, np.exp(x) + b, scale)


@pytest.mark.slow  # other processes
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.parametrize("loaded", ["before", "after"])
def test_a_process_forked_after_threaded_kernels_runs_them(library, loaded):
    """GNU OpenMP's threads do not survive fork(): the child runs kernels on one
    thread instead of waiting for them forever, those of libraries it loads after
    the fork too."""
    x, b = randn(600, 500), randn(500, seed=1)
    kernel(library, "k_big")(x, b)  # OpenMP threads start in this process
    twin = dataclasses.replace(SPECS["k_big"], name="k_big_twin")  # another library
    cpu.build_library(cpu.library_source([twin]))  # compiled here, loaded in the child
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without pytest's cleanup
        try:
            if loaded == "before":
                y, = kernel(library, "k_big")(x, b)
            else:
                y, = cpu.KernelLibrary([twin]).kernel(twin)(x, b)
            os.write(write, b"ok" if np.allclose(y, np.exp(x) + b, atol=1e-6) else b"wrong")
        finally:
            os._exit(0)
    os.close(write)
    deadline = time.monotonic() + 60
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            pytest.fail("the forked child hung in a kernel")
        time.sleep(0.01)
    assert os.read(read, 10) == b"ok"


def test_odd_inputs_are_converted(library):
    """Python numbers, numpy scalars, byte-swapped and unaligned arrays and an
    ndarray subclass are converted before the kernel reads them."""
    x, b = randn(3, 4), randn(3, 4, seed=1)
    want = reference(x, np.float32(0.5), b)
    swapped = b.astype(b.dtype.newbyteorder(">"))
    raw = np.zeros(3 * 4 * 4 + 1, np.uint8)[1:].view(np.float32).reshape(3, 4)
    raw[...] = x
    assert not raw.flags.aligned
    y, z = kernel(library, "k_full")(raw, 0.5, swapped)
    np.testing.assert_allclose(y, want[0], rtol=1e-6)
    y, z = kernel(library, "k_full")(x.view(np.matrix), np.float32(0.5), b)
    np.testing.assert_allclose(y, want[0], rtol=1e-6)


def test_wrong_dtype_or_shape_is_an_error_naming_the_kernel(library):
    x, b = randn(3, 4), randn(3, 4, seed=1)
    with pytest.raises(TypeError, match=r"kernel k_full: input x is float64.*float32"):
        kernel(library, "k_full")(x.astype(np.float64), np.float32(1), b)
    with pytest.raises(ValueError, match=r"kernel k_full: input b has shape \(2, 4\)"):
        kernel(library, "k_full")(x, np.float32(1), b[:2])
    # The arrays reach the kernel as one tuple, whose length the kernel checks.
    for arrays in ((x, np.float32(1)), (x, np.float32(1), b, b)):
        with pytest.raises(TypeError, match=f"kernel k_full takes 3 input arrays, "
                                            f"{len(arrays)} were given"):
            kernel(library, "k_full")(*arrays)


# ---- buffers -----------------------------------------------------------------


def test_free_buffers_are_reused_across_calls(library):
    run = kernel(library, "k_big")
    x, b = randn(600, 500), randn(500, seed=1)
    first = id(run(x, b)[0])  # dropped at once
    assert id(run(x, b)[0]) == first


def test_nothing_a_caller_holds_is_ever_overwritten(library):
    """Results kept whole, as a view, inside a list or dict, or as another
    kernel's input keep their values through later calls of every kernel."""
    run = kernel(library, "k_big")
    x, b = randn(600, 500), randn(500, seed=1)
    kept, view, box = run(x, b)[0], run(x, b)[0][10:20], {"y": run(x, b)[0]}
    snapshots = [kept.copy(), view.copy(), box["y"].copy()]
    for k in range(12):  # more calls than the pool keeps buffers per shape
        y, = run(x * k, b)
        chained, = run(y, b)  # y is both held and an input here
        assert not np.shares_memory(chained, y)
    for held, snap in zip((kept, view, box["y"]), snapshots):
        np.testing.assert_array_equal(held, snap)


def test_outputs_of_one_call_are_distinct_buffers(library):
    y, z = kernel(library, "k_full")(randn(3, 4), np.float32(1), randn(3, 4, seed=1))
    assert not np.shares_memory(y, z)


def test_a_kernel_is_a_builtin_that_refuses_an_output_it_may_not_write(library):
    """Replay code calls each kernel as a builtin function of Python, without ctypes
    converting its arguments; before the kernel runs, it checks every output: a
    C-contiguous, aligned, writeable array of the output's dtype and size, of its own
    memory, that nobody else holds (more references than the replay's), else it
    answers which output (the inputs' count + 1 + its place) and writes nothing."""
    call = library._builtin(SPECS["k_f64"], 1)
    assert type(call) is type(len)
    x, a = randn(5, dtype=np.float64), np.array(2.0)
    y, m = np.full(5, np.nan), np.zeros(5, bool)
    assert call(x, a, y, m) == 0
    np.testing.assert_array_equal(y, x * 2.0 - 1.0)
    held = [np.full(5, np.nan)] * 10
    readonly = np.full(5, np.nan)
    readonly.flags.writeable = False
    for bad in (np.full(10, np.nan)[::2], np.full(10, np.nan)[:5], readonly, held[0],
                np.full(5, np.nan, np.float32), np.full(4, np.nan)):
        assert call(x, a, bad, m) == 3
        assert np.isnan(bad).all()
    assert call(x, a, 1.0, m) == 3 and call(x, a, y, np.zeros(5, np.int8)) == 4
    assert call(x, a, y) == -1


# ---- the library: source, cache, errors --------------------------------------


def test_source_is_readable_and_deterministic(library):
    assert cpu.library_source(list(SPECS.values())) == library.source
    assert "// kernel k_full\n// x: float32[3, 4], a: float32[], b: float32[3, 4] -> " \
           "y: float32[3, 4], z: float32[3, 4]\n" in library.source
    assert 'int k_row(Object* _a0, Object* _a1, Object* _a2, Object* _a3' in library.source


def test_a_kernel_that_computes_what_an_earlier_one_does_calls_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    twin = spec("k_twin", [("p", "float32", (3, 4)), ("q", "float32", ()),
                           ("r", "float32", (3, 4))],
                [("u", "float32", (3, 4)), ("w", "float32", (3, 4))], (3, 4),
                "const float s1 = p * q;\nconst float s2 = tanh(s1 + r);\nu = s2;\n"
                "w = fmax(s2, 0) * p;")  # k_full's body under other names
    other = dataclasses.replace(twin, name="k_other", body=twin.body.replace("* p;", "* q;"))
    library = cpu.KernelLibrary([SPECS["k_full"], twin, other])
    assert library.source.count("DEZERO_FOR_EACH_ELEMENT(") == 2  # k_full's and k_other's
    assert "// kernel k_twin: the loop of k_full\nextern \"C\" int k_twin(Object* _a0, " \
           "Object* _a1, Object* _a2, Object* _a3, Object* _a4, int _threads) { return " \
           "k_full(_a0, _a1, _a2, _a3, _a4, _threads); }" in library.source
    x, b = randn(3, 4), randn(3, 4, seed=1)
    for name, want in (("k_twin", reference(x, np.float32(0.5), b)),
                       ("k_other", (reference(x, np.float32(0.5), b)[0],
                                    np.maximum(np.tanh(x * 0.5 + b), 0) * 0.5))):
        got = library.kernel(twin if name == "k_twin" else other)(x, np.float32(0.5), b)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_a_kernel_is_its_body_once_inside_one_loop():
    # What a reader of the source sees: the header's name, then per kernel a comment,
    # its arguments, one loop (the header writes its variants) and the body once.
    source = cpu.library_source([SPECS["k_full"]])
    assert source.count("tanh(t1 + b)") == 1 and source.count("DEZERO_FOR_EACH_ELEMENT") == 1
    assert source.startswith("// Generated") and '#include "dezero_kernels.h"' in source
    assert len(source.splitlines()) < 30  # and its entry that takes a tuple of arrays
    assert "#pragma" not in source and "struct" not in source  # both in the header


def test_the_header_ships_with_the_package_and_declares_vector_math():
    assert cpu.HEADER.name in Path(cpu.__file__).parents[2].joinpath("setup.py").read_text()
    text = cpu.HEADER.read_text()
    assert "DEZERO_SIMD(tanh)" in text and "__GLIBC_MINOR__ >= 35" in text
    assert "#define DEZERO_FOR_EACH_ELEMENT(" in text


def test_cache_hit_skips_the_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    source = cpu.library_source([SPECS["k_0d"]])
    path = cpu.build_library(source)
    assert path.parent == tmp_path and path.with_suffix(".cpp").read_text() == source
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".build")] == []

    def no_compiler(*args, **kwargs):
        raise AssertionError("compiled again")
    monkeypatch.setattr(cpu.subprocess, "run", no_compiler)
    assert cpu.build_library(source) == path


@pytest.mark.slow  # other processes
def test_two_processes_compiling_at_once_both_load(tmp_path):
    code = textwrap.dedent("""
        import numpy as np
        from dezero.kernels import cpu
        from dezero.kernels.codegen import KernelSpec, Param
        x, y = Param("x", "float", "float32", (4,)), Param("y", "float", "float32", (4,))
        s = KernelSpec("k_twice", (x,), (y,), (4,), "y = x * 2.0f;")
        y, = cpu.KernelLibrary([s]).kernel(s)(np.arange(4, dtype=np.float32))
        print(y.tolist())
    """)
    env = dict(os.environ, DEZERO_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert out.strip() == "[0.0, 2.0, 4.0, 6.0]"
    assert len(list(tmp_path.glob("*.so"))) == 1


def test_compile_error_shows_source_and_compiler_message(tmp_path, monkeypatch):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    bad = spec("k_bad", [("x", "float32", (2,))], [("y", "float32", (2,))], (2,),
               "y = undefined_function(x);")
    with pytest.raises(cpu.CompileError) as info:
        cpu.KernelLibrary([bad])
    text = str(info.value)
    assert "undefined_function" in text and "was not declared" in text
    assert "y = undefined_function(x);" in text and "// kernel k_bad" in text


def test_no_compiler_warns_once_and_replays_unfused(monkeypatch):
    import dezero
    import dezero.functions as F
    from dezero.static import backends

    def chain(x):
        return F.tanh(x * 2.0 + 1.0) * x
    x = randn(5)
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    cpu.compiler.cache_clear()
    cpu._warn_unfused.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plans = [backends.compile(dezero.trace(chain).lower(x), "cpu") for _ in range(3)]
        assert len(caught) == 1
        assert "replay unfused" in str(caught[0].message)
        assert "no C++ compiler found (CXX='no-such-compiler-here')" in str(caught[0].message)
        assert "_k0" not in plans[0].source and not hasattr(plans[0], "kernel_source")
        np.testing.assert_array_equal(plans[0](x).data, chain(x).data)
    finally:
        monkeypatch.delenv("CXX")
        cpu.compiler.cache_clear()
        cpu._warn_unfused.cache_clear()


def test_cxx_may_hold_a_command_with_arguments(tmp_path, monkeypatch):
    # CXX="ccache g++" was looked up as one program name, found nowhere, and every
    # graph replayed unfused. Here a wrapper that logs its arguments stands in.
    wrapper = tmp_path / "wrap.py"
    log = tmp_path / "log"
    wrapper.write_text("import subprocess, sys\n"
                       f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:3]) + '\\n')\n"
                       "sys.exit(subprocess.run(['g++', *sys.argv[2:]]).returncode)\n")
    # A build an earlier test queued would run the wrapper too: let the worker,
    # which takes builds in turn, finish those first.
    pending._WORKER.submit(lambda: None).result()
    monkeypatch.setenv("CXX", f"'{sys.executable}' {wrapper} --tag")
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path / "kernels"))
    cpu.compiler.cache_clear()
    try:
        assert cpu.missing_reason() is None
        assert cpu.compiler()[0] == (sys.executable, str(wrapper), "--tag")
        library = cpu.KernelLibrary([SPECS["k_0d"]])
        y, = library.kernel(SPECS["k_0d"])(np.float32(2), np.float32(3))
        assert y == 7
        assert log.read_text().splitlines() == ["--tag --version", "--tag -O3"]
    finally:
        monkeypatch.undo()
        cpu.compiler.cache_clear()


@pytest.mark.parametrize("cxx", ["no-such-compiler-here", "g++ 'unbalanced"])
def test_a_cxx_that_names_no_compiler_is_the_missing_reason(monkeypatch, cxx):
    monkeypatch.setenv("CXX", cxx)
    cpu.compiler.cache_clear()
    try:
        assert cpu.missing_reason() == f"no C++ compiler found (CXX={cxx!r})"
    finally:
        monkeypatch.undo()
        cpu.compiler.cache_clear()


def test_cache_key_covers_flags_compiler_and_header(monkeypatch, tmp_path):
    source = cpu.library_source([SPECS["k_0d"]])
    key = cpu._cache_key(source)
    assert cpu._cache_key(source) == key and cpu._cache_key(source + " ") != key
    monkeypatch.setattr(cpu, "FLAGS", cpu.FLAGS + ("-O2",))
    assert cpu._cache_key(source) != key
    monkeypatch.undo()
    monkeypatch.setattr(cpu, "compiler", lambda: ("/usr/bin/c++", "c++ (other) 99.1"))
    assert cpu._cache_key(source) != key
    monkeypatch.undo()
    header = tmp_path / cpu.HEADER.name  # the header is part of every library
    header.write_text(cpu.HEADER.read_text() + "\n")
    monkeypatch.setattr(cpu, "HEADER", header)
    assert cpu._cache_key(source) != key


# ---- whole graphs: fused replay against the python backend ---------------------


def test_a_fused_adam_step_replays_like_the_python_backend_and_keeps_what_it_returns():
    import dezero
    import dezero.functions as F
    from dezero import models, optimizers

    def make_step():
        np.random.seed(0)
        model, optimizer = models.MLP((10, 3)), optimizers.Adam(0.01)
        optimizer.setup(model)

        def step(x, t):
            y = model(x)
            loss = F.softmax_cross_entropy(y, t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss, F.tanh(y) * 2.0
        return dezero.trace(step), model
    rng = np.random.default_rng(0)
    calls = [(randn(8, 4, seed=k), rng.integers(0, 3, 8)) for k in range(6)]
    fused, fused_model = make_step()
    fused(*calls[0])
    plain, plain_model = make_step()
    plain(*calls[0])
    assert len(fused.graph.groups) >= 5
    fused_plan, plain_plan = fused.graph.compile("cpu").wait(), plain.graph.compile("python")
    # every group runs its kernel (DEZERO_KERNELS=always), 2 ops on 8x3 as 12-op Adam
    small = next(g.name for g in fused.graph.groups if len(g.nodes) == 2)
    adam = next(g.name for g in fused.graph.groups if len(g.nodes) == 12)
    for name in (small, adam):
        assert f"= _{name}(" in fused_plan.source and f"kernel {name}" in fused_plan.kernel_source
    kept = []
    for x, t in calls[1:]:
        got, want = fused_plan(x, t), plain_plan(x, t)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.data, w.data, rtol=1e-5, atol=1e-6)
        weights = fused_model.l0.W.data  # a kernel's output, stored into state
        kept += [(got[1].data, got[1].data.copy()), (weights, weights.copy())]
    for array, snapshot in kept:  # later replays wrote none of them
        np.testing.assert_array_equal(array, snapshot)
    for p, q in zip(fused_model.params(), plain_model.params()):
        np.testing.assert_allclose(p.data, q.data, rtol=1e-6, atol=1e-7)  # expm1 in Adam


@pytest.mark.parametrize("activation", ["relu", "sigmoid"])
def test_dense_layers_with_fused_epilogues_equal_the_interpreter(activation, monkeypatch):
    """x @ W1 + b1 and the activation run in a kernel that writes into the matmul's
    result, the backward's mask in one with b1's gradient; bias add, relu and the mask
    are arithmetic, so the results are the interpreter's bit for bit (sigmoid's tanh:
    a few ulp, carried through the matmuls after it: dense_scales)."""
    import dezero
    import dezero.functions as F
    from dezero import Variable
    rng = np.random.default_rng(0)
    W1, b1, W2 = (Variable(rng.standard_normal(s).astype(np.float32)) for s in
                  ((20, 300), (300,), (300, 4)))

    def f(x):
        y = F.linear(getattr(F, activation)(F.linear(x, W1, b1)), W2)
        for p in (W1, b1, W2):
            p.cleargrad()
        loss = F.sum(y * y)
        loss.backward()
        return loss, W1.grad, b1.grad, W2.grad
    x = rng.standard_normal((64, 20)).astype(np.float32)
    graph = dezero.trace(f).lower(x)
    plan = graph.compile("cpu").wait()
    # the forward's kernel writes into x @ W1; the loss's and the backward's are
    # reduction kernels (the backward sums b1's gradient in its loop), whose loops
    # write arrays of their own
    assert plan.source.count("'s array") == 1 and len(graph.groups) == 3
    kept = []
    for k in range(3):
        got, want = plan(x + k), graph.interpret(x + k)
        for g, w in zip(got, want):
            if activation == "relu":
                np.testing.assert_array_equal(g.data, w.data)
        if activation != "relu":
            for g, w, scale in zip(got, want, dense_scales(x + k, W1.data, b1.data, W2.data)):
                assert_within_ulps(g.data, w.data, scale)
        kept += [(g.data, g.data.copy()) for g in got]
    for array, snapshot in kept:  # no later replay wrote into what one returned
        np.testing.assert_array_equal(array, snapshot)
    if activation != "relu":  # a sigmoid 1e-4 (840 ulp of 1) off is not within them
        forward = F.Sigmoid.forward
        monkeypatch.setattr(F.Sigmoid, "forward", lambda f, h: forward(f, h) + np.float32(1e-4))
        with pytest.raises(AssertionError, match="differ by more than 8 ulp"):
            for g, w, scale in zip(plan(x), graph.interpret(x), dense_scales(x, W1.data,
                                                                            b1.data, W2.data)):
                assert_within_ulps(g.data, w.data, scale)


def dense_scales(x, W1, b1, W2):
    """The scales of sigmoid's dense layers' loss and gradients (W1's, b1's, W2's) for
    assert_within_ulps: each a = sigmoid(h) may be an ulp of 1 off (tanh), and each
    matmul after it carries that on as the sum of |products| of the scales it
    multiplies, with its own rounding of its operands' sizes."""
    h = x.astype(np.float64) @ W1 + b1
    a = 0.5 * np.tanh(0.5 * h) + 0.5
    y = a @ W2
    ga = 2 * y @ W2.T
    y_scale = product_scale(1 + a, W2)  # a's ulp, then y's rounding
    gy_scale = 2 * y_scale
    gh_scale = product_scale(gy_scale, W2.T) + np.abs(ga)  # times a (1 - a), an ulp off
    return (np.sum(2 * np.abs(y) * y_scale + y * y), product_scale(x.T, gh_scale),
            np.sum(gh_scale, axis=0), product_scale(np.ones_like(a.T), np.abs(2 * y))
            + product_scale(a.T, gy_scale))


def test_debug_level_2_prints_a_line_per_kernel_call(library, capsys):
    from dezero.static import debug
    with debug(2):
        kernel(library, "k_0d")(np.array(2.0, np.float32), np.array(3.0, np.float32))
    err = capsys.readouterr().err
    assert err.startswith("  kernel k_0d: ") and err.endswith(" ms, 12 bytes in/out\n")


def test_every_group_is_compiled_then_measured_unless_dezero_kernels_says(monkeypatch):
    # No rule of sizes: on the CPU every group the fusion pass forms is compiled and
    # timed (the default, measure); always and never force the decision.
    from dezero.static.ir import Group

    def group(n_ops, shape):
        made = Group("k0", [object()] * n_ops, [], [], shape)
        passes.decide(made)
        return made.compiled, made.decision

    monkeypatch.setenv("DEZERO_KERNELS", "measure")
    assert group(2, (3,)) == group(9, (1 << 20,)) == (True, "to be measured")
    monkeypatch.setenv("DEZERO_KERNELS", "always")
    assert group(2, (3,)) == (True, "")  # as on the GPU: no decision to show
    monkeypatch.setenv("DEZERO_KERNELS", "never")
    assert group(9, (1 << 20,)) == (False, "numpy calls: DEZERO_KERNELS=never")
    monkeypatch.setenv("DEZERO_KERNELS", "sometimes")
    with pytest.raises(ValueError, match="DEZERO_KERNELS='sometimes': it takes measure"):
        group(2, (3,))
    small = Group("k0", [object()] * 2, [], [], (3,))
    passes.decide(small, "gpu")  # each cupy call is a kernel launch: one kernel pays
    assert small.compiled and small.decision == ""


def test_with_dezero_kernels_never_the_groups_are_printed_and_run_as_numpy_calls(
        tmp_path, monkeypatch):
    monkeypatch.setenv("DEZERO_KERNELS", "never")
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    x = randn(5)
    graph = dezero.trace(long_chain).lower(x)
    assert "# kernel k0: 8 ops -> " in str(graph) and "(numpy calls: DEZERO_KERNELS=never)" \
        in str(graph)
    plan = graph.compile("cpu")
    assert "_k0(" not in plan.source and not list(tmp_path.iterdir())  # nothing compiled
    np.testing.assert_array_equal(plan(x).data, long_chain(x).data)


def test_print_graph_shows_which_kernels_run_compiled(monkeypatch):
    import dezero
    import dezero.functions as F
    from dezero.kernels import measure

    def f(x):
        return F.exp(x * 2.0) + x, F.tanh(F.sin(F.exp(x * 3.0) + 1.0)) * x

    monkeypatch.setenv("DEZERO_KERNELS", "measure")
    monkeypatch.setattr(backends, "DEFAULT", "python")  # recording compiles no kernels
    monkeypatch.setattr(measure, "_read", lambda path, groups: None)
    times = {3: ({1: 5.0, 2: 7.0}, 2.0), 6: ({1: 4.0, 2: 3.0}, 9.0)}  # by the group's ops
    monkeypatch.setattr(measure, "_time_both",
                        lambda library, step, hints: times[len(step.group.nodes)])
    monkeypatch.setattr(measure, "machine_threads", lambda: 2)
    graph = dezero.trace(f).lower(randn(4, 3))
    small, large = graph.groups
    text = str(graph)
    assert f"# kernel {small.name}: 3 ops -> " in text and text.count("(to be measured)") == 2
    assert str(graph.program).count("ops, to be measured") == 2
    plan = graph.compile("cpu").wait()
    assert not small.compiled and large.compiled
    assert "# 3 ops, as numpy calls" in str(graph.program)
    assert "# 6 ops, compiled on 2 threads" in str(graph.program)
    text = str(graph)
    assert "3 numpy calls 2.0 us, compiled on 1 thread 5.0 us, on 2 threads 7.0 us)" in text
    assert "6 ops -> " in text and "(compiled on 2 threads: 3.0 us a call, on 1 thread " \
        "4.0 us, 6 numpy calls 9.0 us)" in text
    assert f"_{large.name}(" in plan.source and f"_{small.name}(" not in plan.source


def test_names_that_are_lowercase_macros_of_the_headers_compile():
    import dezero
    import dezero.functions as F

    def f(errno, math_errhandling, assert_):
        return F.exp(errno * math_errhandling) + assert_ * errno - 1.0
    arrays = [randn(4, 3, seed=k) for k in range(3)]
    traced = dezero.trace(f)
    traced(*arrays)
    got = traced.graph.compile("cpu").wait()(*arrays)
    want = np.exp(arrays[0] * arrays[1]) + arrays[2] * arrays[0] - 1
    np.testing.assert_allclose(got.data, want, rtol=1e-6, atol=1e-6)


def test_a_truncated_library_in_the_cache_is_rebuilt(tmp_path, monkeypatch, built_0d):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    source = cpu.library_source([SPECS["k_0d"]])
    path = copy_cache(built_0d, tmp_path)
    path.write_bytes(path.read_bytes()[:1000])  # as a full disk or a killed copy leaves it
    assert cpu.build_library(source) == path and path.stat().st_size > 1000
    library = cpu.KernelLibrary([SPECS["k_0d"]])  # loading the cut file was a SIGBUS
    y, = library.kernel(SPECS["k_0d"])(np.float32(2), np.float32(3))
    assert y == 7


def test_a_cache_folder_that_cannot_be_written_warns_and_replays_unfused(tmp_path, monkeypatch):
    import dezero
    import dezero.functions as F

    def chain(x):
        return F.tanh(x * 2.0 + 1.0) * x - 3.0
    x = randn(5)
    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path / "a_file" / "kernels"))
    cpu._warn_unfused.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plans = [dezero.trace(chain).lower(x).compile("cpu") for _ in range(2)]
        assert len(caught) == 1 and "replay unfused" in str(caught[0].message)
        assert "a_file/kernels cannot be written (Not a directory)" in str(caught[0].message)
        assert "DEZERO_CACHE_DIR" in str(caught[0].message)
        np.testing.assert_array_equal(plans[0](x).data, chain(x).data)
    finally:
        cpu._warn_unfused.cache_clear()


def test_a_relative_cache_folder_is_found_again(tmp_path, monkeypatch, built_0d):
    copy_cache(built_0d, tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DEZERO_CACHE_DIR", ".")  # dlopen("x.so") searched the system paths
    library = cpu.KernelLibrary([SPECS["k_0d"]])
    assert library.path.parent == tmp_path
    y, = library.kernel(SPECS["k_0d"])(np.float32(2), np.float32(3))
    assert y == 7


def test_a_compiler_that_writes_no_library_is_a_compile_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "compiler", lambda: (("/bin/true",), "true (a stand-in)"))
    with pytest.raises(cpu.CompileError, match="wrote no library"):
        cpu.build_library(cpu.library_source([SPECS["k_0d"]]))


# =============================================================================
# Trust: a cache folder others could write is refused; one on a noexec mount too
# =============================================================================


def folder_with_mode(tmp_path, mode):
    folder = tmp_path / "kernels"
    folder.mkdir()
    folder.chmod(mode)
    return folder


@pytest.mark.parametrize("mode, group_private", [(0o700, False), (0o755, False),
                                                 (0o770, True)])
def test_a_cache_folder_only_its_owner_can_write_is_trusted(tmp_path, monkeypatch, mode,
                                                            group_private):
    monkeypatch.setattr(cache, "_private_group", lambda info: group_private)
    assert cache.refusal(folder_with_mode(tmp_path, mode)) is None


@pytest.mark.parametrize("mode, why", [
    (0o777, "can be written by other users (mode 777)"),
    (0o1777, "can be written by other users (mode 1777)"),  # sticky: still plantable
    (0o770, "can be written by other users (mode 770)"),    # a group shared with others
])
def test_a_cache_folder_others_can_write_is_refused(tmp_path, monkeypatch, mode, why):
    monkeypatch.setattr(cache, "_private_group", lambda info: False)
    folder = folder_with_mode(tmp_path, mode)
    reason = cache.refusal(folder)
    assert f"the kernel cache {folder} is refused: {folder} {why}" in reason
    assert f"chmod go-w {folder}" in reason and "DEZERO_CACHE_DIR" in reason


def test_a_folder_above_the_cache_that_others_can_replace_is_refused(tmp_path):
    shared = folder_with_mode(tmp_path, 0o777)
    (shared / "mine").mkdir(mode=0o700)
    assert f"{shared} can be written by other users" in cache.refusal(shared / "mine")
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot rename what is mine
    assert cache.refusal(shared / "mine") is None


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX owners")
def test_a_cache_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = folder_with_mode(tmp_path, 0o700)
    owner = folder.stat().st_uid
    monkeypatch.setattr(cache.os, "getuid", lambda: owner + 4242)
    assert f"{folder} belongs to another user (uid {owner})" in cache.refusal(folder)


def test_a_missing_cache_folder_is_made_private(tmp_path, monkeypatch):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path / "a" / "b"))
    old = os.umask(0o002)
    try:
        path = cpu.build_library(cpu.library_source([SPECS["k_0d"]]))
    finally:
        os.umask(old)
    assert path.parent == tmp_path / "a" / "b"
    assert [(p.stat().st_mode & 0o777) for p in (path.parent, path.parent.parent)] == \
        [0o700, 0o700]


def traced_chain_plans(n=2):
    import dezero
    import dezero.functions as F

    def chain(x):
        return F.tanh(x * 2.0 + 1.0) * x - 3.0
    x = randn(5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plans = [dezero.trace(chain).lower(x).compile("cpu").wait() for _ in range(n)]
    np.testing.assert_array_equal(plans[0](x).data, chain(x).data)
    assert not any(hasattr(p, "library") for p in plans)  # unfused
    return [str(w.message) for w in caught]


@pytest.fixture
def fresh_warnings(monkeypatch):
    """cpu's warn-once and its record of unusable caches, empty during the test."""
    monkeypatch.setattr(cpu, "_UNUSABLE", {})
    cpu._warn_unfused.cache_clear()
    yield
    cpu._warn_unfused.cache_clear()


def test_a_refused_cache_warns_once_and_replays_unfused(tmp_path, monkeypatch,
                                                        fresh_warnings):
    folder = folder_with_mode(tmp_path, 0o777)
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(folder))
    messages = traced_chain_plans()
    assert len(messages) == 1 and "replay unfused" in messages[0]
    assert f"{folder} can be written by other users" in messages[0]
    assert list(folder.iterdir()) == []  # nothing compiled into it, nothing loaded


def test_a_cache_on_a_noexec_mount_warns_once_and_replays_unfused(tmp_path, monkeypatch,
                                                                  fresh_warnings):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))

    def noexec(path, *args, **kwargs):  # what dlopen says on a noexec mount
        raise OSError(f"{path}: failed to map segment from shared object")
    monkeypatch.setattr(cpu.ctypes, "CDLL", noexec)
    builds = []
    build = cpu.build_library
    monkeypatch.setattr(cpu, "build_library", lambda *args: builds.append(1) or build(*args))
    messages = traced_chain_plans()
    assert len(messages) == 1 and "replay unfused" in messages[0]
    assert f"libraries in the kernel cache {tmp_path} cannot be loaded (failed to map " \
           f"segment from shared object; a folder on a noexec mount" in messages[0]
    assert len(builds) == 1  # the second graph is not compiled for nothing


# =============================================================================
# Compiling in the background: replays run unfused until the library is built
# =============================================================================


def long_chain(x):  # eight ops in one kernel
    return F.tanh(x * 2.0 + 1.0) * x - 3.0 / (x * x + 1.0)


def long_chain_scale(x, links=1):
    """The scale of long_chain(x) for assert_within_ulps: the sizes of the two terms
    it subtracts (the first a few ulp off: the C library's tanh), which cancel where
    the result is near 0; for `links` of it applied in a row, each one's error is
    carried on by the next one's slope."""
    x, scale = x.astype(np.float64), 0.0
    for _ in range(links):
        t, r = np.tanh(2 * x + 1), 3 / (x * x + 1)
        slope = 2 * x * (1 - t * t) + t + 2 * x * r * r / 3
        scale = np.abs(t * x) + r + np.abs(slope) * scale
        x = t * x - r
    return scale


def test_long_chains_scale_allows_another_tanhs_ulps_and_no_other_chain():
    x = randn(300, 200)
    t = np.tanh(x * 2.0 + 1.0)
    two_ulp_off = np.nextafter(np.nextafter(t, 2), 2) * x - 3.0 / (x * x + 1.0)
    assert_like_long_chain(two_ulp_off, x)
    with pytest.raises(AssertionError):  # near its zeros, more than 1e-6 of the result
        np.testing.assert_allclose(two_ulp_off, long_chain(x).data, rtol=1e-6)
    for wrong in (np.tanh(x * 2.0) * x - 3.0 / (x * x + 1.0),  # an op left out
                  long_chain(x).data * np.float32(1 + 1e-5)):  # 84 ulp off
        with pytest.raises(AssertionError, match="differ by more than 8 ulp"):
            assert_like_long_chain(wrong, x)
    thrice = long_chain(long_chain(long_chain(x))).data
    assert_like_long_chain(np.nextafter(np.nextafter(thrice, 9), 9), x, links=3)
    with pytest.raises(AssertionError, match="differ by more than 8 ulp"):
        assert_like_long_chain(long_chain(long_chain(x)).data, x, links=3)


def assert_like_long_chain(got, x, links=1):
    """got is long_chain of x (`links` times in a row, transposed between or not: an
    elementwise chain moves no values) but for ulps of its scale."""
    want = x
    for _ in range(links):
        want = long_chain(want)
    assert_within_ulps(got, want.data, long_chain_scale(x, links))


@pytest.fixture
def gated_builds(tmp_path, monkeypatch):
    """Traces replay with the cpu backend, from an empty kernel cache whose builds
    wait until the test opens the gate; (the gate, the event set when a build starts)."""
    monkeypatch.setattr(backends, "DEFAULT", "cpu")
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    gate, started, build = threading.Event(), threading.Event(), cpu.build_library

    def gated(source, folder=None):
        if not cpu.cached_library(source, folder)[1]:  # a compile, not a lookup: held back
            assert not started.is_set(), "a second compile"
            started.set()
            assert gate.wait(60), "the test never opened the gate"
        return build(source, folder)
    monkeypatch.setattr(cpu, "build_library", gated)
    yield gate, started
    gate.set()


def test_first_replays_run_unfused_while_the_library_compiles(gated_builds):
    gate, started = gated_builds
    traced = dezero.trace(long_chain)
    x, x2 = randn(7), randn(7, seed=1)
    np.testing.assert_array_equal(traced(x).data, long_chain(x).data)  # records
    plan = traced.graph.compile()
    for _ in range(3):  # the compiler is held back: nobody waits for it
        np.testing.assert_array_equal(traced(x2).data, long_chain(x2).data)
    assert started.wait(60) and not plan.ready and not hasattr(plan, "library")
    assert "kernel k0" not in plan.source
    with pytest.raises(TypeError, match=r"takes 1 inputs \(x\), got 2"):
        plan(x, x2)  # counted as the plan that runs counts them
    gate.set()
    assert plan.wait(timeout=120) is plan and plan.ready
    assert hasattr(plan, "library") and "_k0(" in plan.source
    # tanh from the vector math library: a few ulp from numpy's (as the op tests allow)
    assert_like_long_chain(traced(x2).data, x2)
    again = dezero.trace(long_chain)  # a new graph, its library in the cache now
    again(x)
    assert hasattr(again.graph.compile(), "library")  # and no second compile


@pytest.mark.slow  # compiles a training step's library in a cache of its own
def test_a_training_run_is_eager_codes_to_the_bit_across_the_kernels_taking_over(
        gated_builds):
    # 20 steps of an MLP (relu, mean squared error: arithmetic only) with momentum and
    # weight decay: 7 replays unfused, the kernels land, 12 fused replays; the losses
    # and parameters equal eager code's at every step, before and after.
    from dezero import models, optimizers
    gate, started = gated_builds

    def run(traced):
        np.random.seed(3)
        model = models.MLP((16, 16, 2), activation=F.relu)
        optimizer = optimizers.MomentumSGD(0.05).setup(model)
        optimizer.add_hook(optimizers.WeightDecay(1e-3))
        x, t = randn(32, 3), randn(32, 2, seed=1)

        def step(x, t):
            loss = F.mean_squared_error(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss
        step = dezero.trace(step) if traced else step
        losses = []
        for i in range(20):
            losses.append(step(x, t).data.copy())
            if traced and i == 7:
                plan = step.graph.compile()
                assert started.wait(60) and not plan.ready
                gate.set()
                assert hasattr(plan.wait(timeout=120), "library")
                assert len(plan.graph.groups) >= 4
        return losses + [p.data for p in model.params()]
    for got, want in zip(run(traced=True), run(traced=False), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_process_forked_while_the_library_compiles_builds_it_again(gated_builds):
    gate, started = gated_builds
    traced, x = dezero.trace(long_chain), randn(7)
    traced(x)
    plan = traced.graph.compile()
    assert started.wait(60)
    pid = os.fork()  # the parent's build, held at the gate, is not in the child
    if pid == 0:
        code = 1
        try:
            started.clear()  # the child's copies: its own build starts and passes
            gate.set()
            plan.wait(timeout=120)
            assert hasattr(plan, "library")
            assert_like_long_chain(traced(x).data, x)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    gate.set()
    assert hasattr(plan.wait(timeout=120), "library")


def test_threads_replaying_while_the_library_lands_switch_once(gated_builds, monkeypatch,
                                                               capsys):
    from dezero.static import debugging
    gate, started = gated_builds
    traced, x = dezero.trace(long_chain), randn(7)
    traced(x)
    plan, errors = traced.graph.compile(), []

    def replay():  # until the library is ready, and 50 times after
        try:
            while not plan.ready:
                assert_like_long_chain(traced(x).data, x)
            for _ in range(50):
                assert_like_long_chain(traced(x).data, x)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    monkeypatch.setattr(debugging, "LEVEL", 1)
    threads = [threading.Thread(target=replay) for _ in range(4)]
    for thread in threads:
        thread.start()
    assert started.wait(60)
    gate.set()
    for thread in threads:
        thread.join(120)
    assert errors == [] and hasattr(plan, "library")
    assert capsys.readouterr().err.count("kernels of long_chain ready") == 1


def test_a_library_that_fails_to_build_warns_once_and_replays_unfused(gated_builds,
                                                                      monkeypatch):
    gate, _ = gated_builds

    def refused(source, folder):
        raise cpu.CompileError("the C++ compiler refused the generated kernels")
    monkeypatch.setattr(cpu, "build_library", refused)
    traced = dezero.trace(long_chain)
    x = randn(7)
    traced(x)
    plan = traced.graph.compile("cpu")
    with pytest.raises(cpu.CompileError), pytest.warns(RuntimeWarning) as caught:
        plan.wait(timeout=60)
    assert "graph long_chain were not built, it replays unfused" in str(caught[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        np.testing.assert_array_equal(traced(x).data, long_chain(x).data)


# =============================================================================
# Compiled or not, by measurement: timed both ways, kept beside the library
# =============================================================================


@pytest.fixture(scope="module")
def chain_library():
    """chain_library(*shape): long_chain's library for an input of that shape, built
    once in the suite's kernel cache; the tests of timings start their own cache
    from a copy of it rather than a compile."""
    folder = cache.folder()  # the suite's, before a test sets its own

    def library(*shape):
        graph = dezero.trace(long_chain).lower(randn(*shape))
        specs = [kernel_spec(g) for g in graph.groups if g.compiled]
        return cpu.build_library(cpu.library_source(specs), folder)
    return library


@pytest.mark.measures
def test_each_kernel_is_timed_against_its_numpy_calls_once_and_kept(tmp_path, monkeypatch,
                                                                    capsys, chain_library):
    from dezero.kernels import measure
    from dezero.static import debugging
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    copy_cache(chain_library(5), tmp_path)
    monkeypatch.setattr(measure, "machine_threads", lambda: 1)  # threads: tested below
    x = randn(5)
    plan = dezero.trace(long_chain).lower(x).compile("cpu").wait()
    stored = json.loads(plan.library.path.with_suffix(".json").read_text())
    assert list(stored) == ["k0"] and list(stored["k0"]["kernel_us"]) == ["1"]
    kernel_us, numpy_us = stored["k0"]["kernel_us"]["1"], stored["k0"]["numpy_us"]
    assert kernel_us > 0 and numpy_us > 0

    def no_timing(*args):
        raise AssertionError("timed again")
    monkeypatch.setattr(measure, "_time_both", no_timing)
    monkeypatch.setattr(debugging, "LEVEL", 3)
    again = dezero.trace(long_chain).lower(x).compile("cpu")  # another process would too
    kernel, numpy = f"{kernel_us:.1f} us", f"8 numpy calls {numpy_us:.1f} us"
    how = f"compiled on 1 thread: {kernel} a call, {numpy}" if kernel_us <= numpy_us * \
        measure.MARGIN else f"as numpy calls: {numpy}, compiled on 1 thread {kernel}"
    assert f"kernel k0 runs {how} (stored in the kernel cache)" in capsys.readouterr().err
    assert_like_long_chain(again(x).data, x)


def test_the_numpy_side_timed_is_the_replay_codes_statements_for_the_group():
    # What measure.py times against a kernel is what the replay would run instead:
    # the python backend's lines for the group, not each op's forward.
    from dezero.static.backends import pycode
    from dezero.static.lowering import lower
    graph = dezero.trace(long_chain).lower(randn(5))
    step, = (s for s in lower(graph).steps if s.kind == "kernel")
    statements = pycode.group_function(step)
    body = statements.source.splitlines()[1:-1]
    assert len(body) >= 6 and all(line in graph.compile("python").source for line in body)
    assert "_xp.tanh(" in statements.source  # inline, as the replay code writes it
    plan = graph.compile("cpu").wait()
    arrays = [randn(*v.shape, seed=k) for k, v in enumerate(step.group.inputs)]
    kernel = plan.library.kernel(plan.library.specs[step.group.name])
    x, a, b, c = (array.astype(np.float64) for array in arrays)  # the chain's constants
    scale = np.abs(np.tanh(x * a + b) * x) + np.abs(c / (x * x + b))  # as long_chain_scale
    for got, want in zip(kernel(*arrays), statements(*arrays), strict=True):
        assert_within_ulps(got, want, scale)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_the_numpy_statements_of_every_kind_of_kernel_compute_what_it_does(optimizer):
    # The spiral step's kernels: a reduction with its prologue (the bias gradient), a
    # horizontal one (the updates), one on 0-d arrays (Adam's rate), vertical ones;
    # each one's numpy statements run on its inputs as measure.py gives them.
    from train_helpers import training_step

    from dezero import models, optimizers
    from dezero.static.backends import pycode
    from dezero.static.lowering import lower
    x, t = dezero.datasets.get_spiral(train=True)
    model = models.MLP((10, 3), activation=F.sigmoid)
    step = training_step(model, getattr(optimizers, optimizer)().setup(model), traced=True)
    step(x[:30], t[:30])
    plan = step.graph.compile("cpu").wait()
    holder = {name: library for library in plan.libraries for name in library.specs}
    steps = [s for s in lower(step.graph).steps if s.kind == "kernel" and s.group.name in holder]
    kinds = {"horizontal" if s.group.segments else "reduction" if s.group.axes is not None
             else "0-d" if s.group.shape == () else "vertical" for s in steps}
    assert kinds >= {"horizontal", "reduction"} | ({"0-d"} if optimizer == "Adam" else set())
    rng = np.random.default_rng(0)
    for s in steps:
        arrays = [np.asarray(rng.random(v.shape) * 0.5 + 0.5, v.dtype) for v in s.group.inputs]
        library = holder[s.group.name]
        compiled = library.kernel(library.specs[s.group.name])(*arrays)
        statements = pycode.group_function(s)(*arrays)
        assert len(statements) == len(s.group.outputs)
        for got, want in zip(compiled, statements, strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=s.group.name)


def test_a_kernel_reading_an_input_twice_in_one_op_takes_it_once():
    # x * x: the group's inputs name x once, so that its numpy statements, which
    # measure.py times (the default), are a function at all ('duplicate argument x').
    from dezero.static.backends import pycode
    from dezero.static.lowering import lower
    x = randn(3, 40)
    for square in (lambda x: F.sum(x * x, axis=1) * 2.0, lambda x: (x * x + 1.0) * 3.0):
        graph = dezero.trace(square).lower(x)
        step, = (s for s in lower(graph).steps if s.kind == "kernel")
        assert [v.name for v in step.group.inputs].count("x") == 1
        arrays = {n.outputs[0].name: n.payload for n in graph.nodes if n.kind == "const"}
        got, = pycode.group_function(step)(*(arrays.get(v.name, x) for v in step.group.inputs))
        np.testing.assert_array_equal(got, square(x).data)


def test_fastest_takes_turns_and_keeps_each_ones_best_call(monkeypatch):
    from dezero.kernels import measure
    now, calls = [0.0], []
    monkeypatch.setattr(measure, "clock", lambda: now[0])

    def taking(name, seconds):
        def run():
            calls.append(name)
            now[0] += seconds.pop(0) if len(seconds) > 1 else seconds[0]
        return run
    # a spike in either one's calls (another process took the core) does not count
    kernel, numpy = taking("k", [9e-6, 2e-6, 40e-6, 2e-6]), taking("n", [3e-6, 30e-6, 3e-6])
    assert measure.fastest([kernel, numpy]) == pytest.approx([2.0, 3.0])
    assert calls == ["k", "n"] * measure.CALLS


@pytest.mark.measures
@pytest.mark.parametrize("kernel_us, numpy_us, how", [
    ({1: 2.0, 4: 9.0}, 9.0, "compiled on 1 thread"),
    ({1: 2.1, 4: 2.0}, 2.0, "compiled on 1 thread"),  # within the margin: one thread
    ({1: 9.0, 4: 2.0}, 9.0, "compiled on 4 threads"),  # a 5-element kernel: measured too
    ({1: 9.0, 4: 9.0}, 2.0, "as numpy calls"),
    ({1: 2.3, 4: 2.3}, 2.0, "as numpy calls")])
def test_a_group_runs_the_side_timed_faster_and_the_decision_is_kept(monkeypatch, capsys,
                                                                     kernel_us, numpy_us, how):
    # A fake clock: a call of the kernel on n threads takes kernel_us[n], a run of the
    # group's numpy statements numpy_us, whatever the machine's load.
    from dezero.kernels import measure
    from dezero.static import debugging
    from dezero.static.backends import pycode
    x = randn(5)
    first = dezero.trace(long_chain).lower(x).compile("cpu").wait()  # in the suite's cache
    first.library.path.with_suffix(".json").unlink()
    now = [0.0]
    monkeypatch.setattr(measure, "clock", lambda: now[0])
    monkeypatch.setattr(measure, "machine_threads", lambda: 4)

    def taking(fn, us):
        def run(*args, **kwargs):
            now[0] += us * 1e-6
            return fn(*args, **kwargs)
        return run
    group_function, kernel = pycode.group_function, cpu.KernelLibrary.kernel
    monkeypatch.setattr(pycode, "group_function",
                        lambda step: taking(group_function(step), numpy_us))
    monkeypatch.setattr(cpu.KernelLibrary, "kernel", lambda library, spec, threads=None, **kw:
                        taking(kernel(library, spec, threads, **kw), kernel_us.get(threads, 0)))
    monkeypatch.setattr(debugging, "LEVEL", 3)
    threads = 4 if "4 threads" in how else 1
    for where in ("measured", "stored in the kernel cache"):
        graph = dezero.trace(long_chain).lower(x)
        plan = graph.compile("cpu")
        compiled = how != "as numpy calls"
        assert graph.groups[0].compiled is compiled and ("= _k0(" in plan.source) is compiled
        err = capsys.readouterr().err
        other = f"on {5 - threads} thread{'s' * (threads == 1)} {kernel_us[5 - threads]:.1f} us"
        numpy = f"8 numpy calls {numpy_us:.1f} us"
        decision = f"{how}: {kernel_us[threads]:.1f} us a call, {other}, {numpy}" if compiled \
            else f"as numpy calls: {numpy}, compiled on 1 thread {kernel_us[1]:.1f} us, {other}"
        assert f"kernel k0 runs {decision} ({where})" in err
        assert f"({decision})" in str(graph)  # print(graph) shows it
        assert "  kernel k0: " not in err  # level 2's line per call: not while timing
        assert plan.library.threads == {"k0": threads}
        stored = json.loads(plan.library.path.with_suffix(".json").read_text())
        assert stored == {"k0": timings({n: pytest.approx(us) for n, us in kernel_us.items()},
                                        pytest.approx(numpy_us))}
        assert_like_long_chain(plan(x).data, x)
        capsys.readouterr()  # the replay's lines
        monkeypatch.setattr(measure, "clock", None)  # the next compile times nothing


def timings(kernel_us, numpy_us):
    """The kernel cache's record of one kernel's times: {threads: us} and numpy's."""
    return {"kernel_us": {str(n): us for n, us in kernel_us.items()}, "numpy_us": numpy_us}


@pytest.mark.measures
@pytest.mark.parametrize("kernel_us, numpy_us, compiled", [(2.0, 9.0, True),
                                                           (9.0, 2.0, False)])
def test_a_group_runs_the_faster_way(tmp_path, monkeypatch, kernel_us, numpy_us, compiled,
                                     chain_library):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    copy_cache(chain_library(5), tmp_path)
    x = randn(5)
    dezero.trace(long_chain).lower(x).compile("cpu").wait()  # the library, in the cache
    stored, = tmp_path.glob("*.json")
    stored.write_text(json.dumps({"k0": timings({1: kernel_us}, numpy_us)}))
    graph = dezero.trace(long_chain).lower(x)
    plan = graph.compile("cpu")
    assert ("= _k0(" in plan.source) is compiled and graph.groups[0].compiled is compiled
    assert ("(as numpy calls: 8 numpy calls" in str(graph)) is not compiled
    assert_like_long_chain(plan(x).data, x)


@pytest.mark.measures
@pytest.mark.parametrize("kernel_us, threads", [({1: 50.0, 4: 20.0}, 4),
                                                ({1: 20.0, 4: 19.0}, 1)])
def test_a_large_kernel_runs_on_the_threads_measured_faster(tmp_path, monkeypatch, capsys,
                                                            kernel_us, threads, chain_library):
    # One thread unless all of them are faster by the margin; the times are pinned
    # here, and kept in the cache.
    from dezero.kernels import measure
    from dezero.static import debugging
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    copy_cache(chain_library(300, 200), tmp_path)
    monkeypatch.setattr(measure, "machine_threads", lambda: 4)
    monkeypatch.setattr(measure, "_time_both", lambda library, group, hints: (kernel_us, 90.0))
    monkeypatch.setattr(debugging, "LEVEL", 3)
    x = randn(300, 200)
    plan = dezero.trace(long_chain).lower(x).compile("cpu").wait()
    assert plan.library.threads == {"k0": threads}
    assert plan.fn.__globals__["_k0"].threads == threads  # what the replay code calls
    other = 5 - threads
    assert f"kernel k0 runs compiled on {threads} thread{'s' * (threads > 1)}: " \
           f"{kernel_us[threads]:.1f} us a call, on {other} thread{'s' * (other > 1)} " \
           f"{kernel_us[other]:.1f} us, 8 numpy calls 90.0 us (measured)" \
           in capsys.readouterr().err
    stored = json.loads(plan.library.path.with_suffix(".json").read_text())
    assert stored == {"k0": timings(kernel_us, 90.0)}
    assert_like_long_chain(plan(x).data, x)


@pytest.mark.measures
def test_a_cache_filled_on_a_larger_machine_asks_for_no_more_threads_than_this_has(
        tmp_path, monkeypatch, chain_library):
    from dezero.kernels import measure
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    copy_cache(chain_library(300, 200), tmp_path)
    monkeypatch.setattr(measure, "_read", lambda path, groups: {"k0": ({1: 90.0, 64: 9.0},
                                                                       99.0)})
    monkeypatch.setattr(measure, "machine_threads", lambda: 3)
    x = randn(300, 200)
    plan = dezero.trace(long_chain).lower(x).compile("cpu").wait()
    assert plan.library.threads == {"k0": 3}
    assert_like_long_chain(plan(x).data, x)


@pytest.mark.measures
def test_a_large_kernel_is_timed_on_one_thread_and_on_all(tmp_path, monkeypatch, chain_library):
    from dezero.kernels import measure
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    copy_cache(chain_library(300, 200), tmp_path)
    monkeypatch.setattr(measure, "machine_threads", lambda: 2)  # two, on any machine
    x = randn(300, 200)
    plan = dezero.trace(long_chain).lower(x).compile("cpu").wait()
    stored = json.loads(plan.library.path.with_suffix(".json").read_text())["k0"]
    assert sorted(stored["kernel_us"]) == ["1", "2"]
    assert all(us > 0 for us in stored["kernel_us"].values())
    assert plan.library.threads["k0"] in (1, 2)
    assert_like_long_chain(plan(x).data, x)


@pytest.mark.measures
@pytest.mark.parametrize("text", [
    "{", '{"k0": [1]}', '{"k9": [1, 2]}', '{"k0": ["a", 2]}', '{"k0": [1, 2]}',
    '{"k0": {"kernel_us": {}, "numpy_us": 2}}', '{"k0": {"kernel_us": {"0": 1}, "numpy_us": 2}}',
    '{"k0": {"kernel_us": {"1": true}, "numpy_us": 2}}', '{"k0": {"kernel_us": {"1": 1}}}'])
def test_damaged_or_foreign_timings_in_the_cache_are_measured_again(tmp_path, monkeypatch,
                                                                     text, chain_library):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    copy_cache(chain_library(5), tmp_path)
    x = randn(5)
    first = dezero.trace(long_chain).lower(x).compile("cpu").wait()
    stored = first.library.path.with_suffix(".json")
    stored.write_text(text)
    dezero.trace(long_chain).lower(x).compile("cpu")
    again = json.loads(stored.read_text())
    assert list(again) == ["k0"] and len(again["k0"]["kernel_us"]) >= 1


@pytest.mark.slow  # another process
def test_at_exit_only_the_library_being_compiled_is_waited_for(tmp_path):
    log, compiler = tmp_path / "compiles.log", tmp_path / "slow-cxx"
    compiler.write_text(f"#!/bin/sh\ncase \"$*\" in *--version*) ;; *) echo x >> {log}; "
                        f"sleep 1;; esac\nexec {shutil.which('g++') or 'c++'} \"$@\"\n")
    compiler.chmod(0o755)
    code = textwrap.dedent("""
        import numpy as np, dezero, dezero.functions as F
        x = np.ones(5, np.float32)
        for k in range(3):  # three graphs, three libraries queued
            dezero.trace(lambda x, k=k: F.tanh(x * 2.0 + k) * x - 3.0 / (x * x + 1.0))(x)
    """)
    env = dict(os.environ, DEZERO_CACHE_DIR=str(tmp_path / "cache"), DEZERO_BACKEND="cpu",
               CXX=str(compiler),
               PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert log.read_text().count("x") == 1  # the first compile ran; two were dropped
    assert len(list((tmp_path / "cache").glob("*.so"))) == 1


def test_a_graph_of_many_loops_compiles_as_libraries_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cpu, "LOOPS_PER_LIBRARY", 1)

    def three_kernels(x):  # two loops: on 4x5 (k0, and k2 again) and on 5x4 (k1)
        y = long_chain(F.transpose(long_chain(x)))
        return long_chain(F.transpose(y))
    x = randn(4, 5)
    plan = dezero.trace(three_kernels).lower(x).compile("cpu").wait()
    assert [sorted(lib.specs) for lib in plan.libraries] == [["k0", "k2"], ["k1"]]
    assert not hasattr(plan, "library") and len(list(tmp_path.glob("*.so"))) == 2
    assert "// kernel k2: the loop of k0" in plan.kernel_source
    assert all(f"= _k{k}(" in plan.source for k in range(3))
    assert_like_long_chain(plan(x).data, x, links=3)


def test_reductions_that_differ_only_in_their_values_names_share_one_loop():
    # An accumulator is named after its value (_acc_b): an unrolled RNN's steps made
    # one loop each, and its libraries grew with its length.
    def twice(x, y):
        return F.sum(F.exp(x) * 2.0, axis=0), F.sum(F.exp(y) * 2.0, axis=0)
    graph = dezero.trace(twice).lower(randn(4, 5), randn(4, 5))
    specs = [kernel_spec(g) for g in graph.groups]
    assert len(specs) == 2 and all(s.axes == (0,) for s in specs)
    assert [len(part) for part in cpu.split(specs)] == [2]
    assert f"// kernel {specs[1].name}: the loop of {specs[0].name}" in \
        cpu.library_source(specs)


@pytest.mark.measures
def test_kernels_of_one_loop_on_arrays_of_one_type_are_timed_once(tmp_path, monkeypatch):
    # An unrolled RNN has a hundred kernels of a few loops: timing each took seconds.
    from dezero.kernels import measure
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))
    asked = []
    monkeypatch.setattr(measure, "_time_both", lambda library, step, hints: (
        asked.append(step.group.name) or ({1: 10.0 + len(asked)}, 90.0)))

    def three_kernels(x):  # k0 and k2 on 4x5, k1 on 5x4
        return long_chain(F.transpose(long_chain(F.transpose(long_chain(x)))))
    x = randn(4, 5)
    graph = dezero.trace(three_kernels).lower(x)
    plan = graph.compile("cpu").wait()
    assert asked == ["k0", "k1"]  # k2 is k0's loop on arrays of k0's type
    decisions = [g.decision for g in graph.groups]
    assert decisions[0] == decisions[2] == "compiled on 1 thread: 11.0 us a call, 8 numpy " \
                                           "calls 90.0 us"
    assert "12.0 us" in decisions[1]
    assert_like_long_chain(plan(x).data, x, links=3)
