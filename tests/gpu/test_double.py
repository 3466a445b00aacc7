"""The cupy test double itself (tests/fakecupy): it refuses what cupy refuses and runs
kernels as cupy does. Runs only under the double (see README.md here).

    PYTHONPATH=tests/fakecupy:. python -m pytest -q tests/gpu
"""
import sys
import types
from pathlib import Path

import numpy as np
import pytest

cp = pytest.importorskip("cupy")
if Path(cp.__file__).parents[1].name != "fakecupy":
    pytest.skip("runs under the cupy test double only", allow_module_level=True)

import cupyx  # noqa: E402
from cupy import _names  # noqa: E402


def test_the_double_defines_only_names_real_cupy_has():
    owners = {"cupy": cp, "cupy.cuda": cp.cuda, "cupy.cuda.runtime": cp.cuda.runtime,
              "cupy.random": cp.random, "cupyx": cupyx, "cupy.ndarray": cp.ndarray,
              "cupy.cuda.Device": cp.cuda.Device, "cupy.cuda.Stream": cp.cuda.Stream,
              "cupy.cuda.Event": cp.cuda.Event, "cupy.cuda.MemoryPool": cp.cuda.MemoryPool,
              "cupy.cuda.MemoryPointer": cp.cuda.MemoryPointer,
              "cupy.ElementwiseKernel": cp.ElementwiseKernel,
              "cupy.ReductionKernel": cp.ReductionKernel}
    extra = [f"{owner}.{name}" for owner, obj in owners.items() for name in vars(obj)
             if not name.startswith("_") and not isinstance(vars(obj)[name], types.ModuleType)
             and not _names.has(owner, name)]
    extra += [f"cupy.ndarray.{n}" for n in vars(cp.ndarray) if n.startswith("__") and
              n not in ("__slots__", "__weakref__", "__module__", "__doc__", "__getattr__")
              and not _names.has("cupy.ndarray", n)]
    assert extra == []


def test_names_real_cupy_lacks_are_attribute_errors():
    with pytest.raises(AttributeError, match="cupy 14.2.0 has no such name"):
        cp.no_such_function  # noqa: B018
    with pytest.raises(AttributeError, match="does not provide it"):
        cp.fft  # noqa: B018 - real cupy has it, the double does not
    with pytest.raises(AttributeError, match="has no such name"):
        cp.ones(3).resize  # numpy's ndarray has it, cupy's not
    with pytest.raises(TypeError):
        [0, 1][cp.asarray(1)]  # no __index__ on cupy's ndarray


def test_arrays_do_not_mix_with_numpy():
    x, n = cp.ones(3, cp.float32), np.ones(3, np.float32)
    for mix in (lambda: x + n, lambda: n + x, lambda: n * x, lambda: cp.add(x, n),
                lambda: cp.maximum(n, 0), lambda: cp.zeros_like(n)):
        with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
            mix()
    with pytest.raises(TypeError, match="Implicit conversion to a NumPy array"):
        np.asarray(x)
    assert not isinstance(x, np.ndarray) and type(x).__module__ == "cupy"
    with pytest.raises(ValueError, match="Unsupported dtype"):
        cp.asarray(np.array(["a", "b"]))  # no strings or objects on a device
    assert isinstance(np.exp(x), cp.ndarray)  # numpy's ufuncs dispatch to cupy's
    assert isinstance(np.sum(x), cp.ndarray) and np.sum(x).ndim == 0  # 0-d, not a scalar


def test_data_is_a_pointer_and_copies_out_are_numpy():
    x = cp.arange(4, dtype=cp.float64)
    assert isinstance(x.data, cp.cuda.MemoryPointer) and not hasattr(x.data, "nbytes")
    host = x.get()
    host[0] = 7
    assert type(host) is np.ndarray and float(x[0]) == 0 and cp.asnumpy(x)[0] == 0
    y = cp.asarray(host)
    host[1] = 9
    assert float(y[1]) == 1  # asarray of numpy copies to the device
    assert cp.asarray(y) is y and cp.get_array_module(y) is cp
    assert cp.get_array_module(host) is np and x.device.id == 0


def test_a_view_holds_the_array_it_views_as_its_base():
    # as cupy's views do: code that counts references to an array (kernels/outputs)
    # sees a view someone kept
    x = cp.zeros((4, 3))
    alone = sys.getrefcount(x)
    views = [x[1:3], x.T, x.reshape(-1), x[1:3].T]
    assert all(v.base is x for v in views) and x.base is None
    assert sys.getrefcount(x) == alone + len(views)


def test_random_draws_leave_numpys_global_state():
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    cp.random.seed(1)
    a = cp.random.randn(3, 2, dtype=cp.float32)
    assert a.dtype == np.float32 and a.shape == (3, 2) and isinstance(a, cp.ndarray)
    assert np.array_equal(np.random.get_state()[1], before)
    cp.random.seed(1)
    assert np.array_equal(cp.asnumpy(cp.random.randn(3, 2, dtype=cp.float32)), a.get())


def test_scatter_add_adds_once_per_repeated_index():
    g = cp.zeros(3)
    cupyx.scatter_add(g, cp.asarray([0, 0, 2]), cp.ones(3))
    assert g.get().tolist() == [2, 0, 1]


def test_cuda_stand_ins():
    assert cp.cuda.runtime.getDeviceCount() == 1 and cp.cuda.is_available()
    with cp.cuda.Device(0) as device, cp.cuda.Stream() as stream:
        assert device.id == 0 and cp.cuda.get_current_stream() is stream
    assert cp.cuda.get_current_stream() is cp.cuda.Stream.null
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    end.record()
    end.synchronize()
    assert cp.cuda.get_elapsed_time(start, end) >= 0
    assert cp.get_default_memory_pool().used_bytes() == 0
    with pytest.raises(cp.cuda.runtime.CUDARuntimeError):
        cp.cuda.Device(1)


# =============================================================================
# ElementwiseKernel: compiled and run, with cupy's launch rules
# =============================================================================


def test_kernel_runs_the_body_with_broadcasting_and_typed_outputs():
    kernel = cp.ElementwiseKernel("float32 x, T y", "T z, bool pos",
                                  "z = tanh(x) * y + i;\npos = x > 0", "k_doc_a")
    x = cp.asarray(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3))
    y = cp.asarray([1.0, 2.0, 3.0])  # float64: T is float64
    z, pos = kernel(x, y)
    index = np.arange(6).reshape(2, 3)
    expected = np.tanh(x.get()).astype(np.float64) * y.get() + index
    assert z.dtype == np.float64 and pos.dtype == np.bool_ and z.shape == (2, 3)
    np.testing.assert_allclose(z.get(), expected, rtol=1e-6)
    assert pos.get().tolist() == (x.get() > 0).tolist()


def test_kernel_takes_strided_views_and_scalars_cast_to_the_param():
    kernel = cp.ElementwiseKernel("T x, float32 s", "T y", "y = x * s", "k_doc_b",
                                  return_tuple=True)
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)[:, ::2]
    (y,) = kernel(x, 0.5)
    assert y.get().tolist() == (x.get() * 0.5).tolist()
    out = cp.empty((3, 2), cp.float32)
    assert kernel(x, 2, out)[0] is out and out.get().tolist() == (x.get() * 2).tolist()


def test_kernel_launch_refuses_what_cupy_refuses():
    kernel = cp.ElementwiseKernel("float32 x, T y", "T z", "z = x + y", "k_doc_c")
    x = cp.ones(3, cp.float32)
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        kernel(np.ones(3, np.float32), x)
    with pytest.raises(TypeError, match="Type is mismatched. x float64 float32"):
        kernel(cp.ones(3, cp.float64), x)
    with pytest.raises(TypeError, match="Wrong number of arguments"):
        kernel(x)
    with pytest.raises(ValueError, match="Out shape is mismatched"):
        kernel(x, x, cp.ones(1, cp.float32))  # broadcasts, but is not the shape
    with pytest.raises(TypeError, match="Type is mismatched"):
        kernel(x, x, cp.ones(3, cp.float64))
    with pytest.raises(ValueError, match="Loop size is Undecided"):
        cp.ElementwiseKernel("float32 x", "float32 z", "z = x", "k_doc_d")(1.0)
    with pytest.raises(ValueError, match="Can not use 'i'"):
        cp.ElementwiseKernel("float32 i", "float32 z", "z = i", "k_doc_e")


def test_raw_params_index_their_own_arrays_over_a_size_given():
    kernel = cp.ElementwiseKernel("raw float32 x, raw float32 s", "raw float32 y",
                                  "y[i] = x[i] * s[0] + i", "k_doc_raw")
    x = cp.arange(12, dtype=cp.float32).reshape(3, 4)[:, ::2]  # strided: C order of x
    y = cp.empty((2, 3), cp.float32)  # a raw output of another shape
    (out,) = (kernel(x, cp.asarray(np.float32(2)), y, size=6),)
    assert out is y
    assert y.get().ravel().tolist() == (x.get().ravel() * 2 + np.arange(6)).tolist()
    made = kernel(x, cp.asarray(np.float32(2)), size=6)  # raw outputs made of (size,)
    assert made.shape == (6,) and made.get().tolist() == y.get().ravel().tolist()


def test_a_body_reads_cupys_infinities_and_a_raw_elements_address():
    """cupy includes math_constants.h in every kernel (CUDART_INF_F, CUDART_INF), and
    x[k] of a raw output is a reference, whose address a body may take (a row of a
    contiguous array)."""
    kernel = cp.ElementwiseKernel("raw float64 x", "raw float64 y, raw float32 m",
                                  "double* const row = &y[i * 3];\n"
                                  "for (int r = 0; r < 3; ++r) row[r] = x[i * 3 + r] * 2;\n"
                                  "m[i] = -CUDART_INF_F;", "k_doc_inf")
    x, y, m = cp.arange(6, dtype=cp.float64), cp.empty(6, cp.float64), cp.empty(2, cp.float32)
    kernel(x, y, m, size=2)
    assert y.get().tolist() == [0, 2, 4, 6, 8, 10] and (m.get() == -np.inf).all()


def test_raw_launches_refuse_what_cupy_refuses():
    kernel = cp.ElementwiseKernel("raw float32 x, float32 b", "raw float32 y",
                                  "y[i] = x[i] + b", "k_doc_raw2")
    x, b = cp.ones(4, cp.float32), cp.ones(4, cp.float32)
    with pytest.raises(ValueError, match="Specified 'size' can be used only if all of "
                                         "the ndarray are 'raw'"):
        kernel(x, b, cp.empty(4, cp.float32), size=4)
    with pytest.raises(ValueError, match="Output array size is Undecided"):
        kernel(x, b)  # b sets the loop, but nothing the size of the raw output
    with pytest.raises(ValueError, match="Loop size is Undecided"):
        kernel(x, 1.0, cp.empty(4, cp.float32))  # every array raw, no size
    with pytest.raises(Exception, match='Unknown keyword "rew"'):
        cp.ElementwiseKernel("rew float32 x", "float32 y", "y = x", "k_doc_raw3")


def test_a_body_that_does_not_compile_raises_with_the_compiler_log():
    kernel = cp.ElementwiseKernel("float32 x", "float32 z", "z = not_a_function(x)",
                                  "k_doc_f")
    with pytest.raises(cp.cuda.compiler.CompileException, match="not_a_function"):
        kernel(cp.ones(2, cp.float32))


# =============================================================================
# ReductionKernel: map, reduce, post_map compiled and run, with cupy's call rules
# =============================================================================


def _rand(*shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_reduction_kernel_sums_over_axes_as_numpy():
    l2 = cp.ReductionKernel("T x", "T y", "x * x", "a + b", "y = a", "0", "l2_doc_a")
    x = _rand(4, 5, 6)
    cases = [(None, False), (1, False), ((0, 2), False), (-1, True), ((2, 0), True)]
    for axis, keepdims in cases:
        got = l2(cp.asarray(x), axis=axis, keepdims=keepdims)
        want = (x * x).sum(axis=axis, keepdims=keepdims)
        assert isinstance(got, cp.ndarray) and got.shape == want.shape
        np.testing.assert_allclose(got.get(), want, rtol=1e-12)


def test_reduction_kernel_max_min_identity_and_post_map():
    x = _rand(7, 9, seed=1)
    vmax = cp.ReductionKernel("T x", "T y", "x", "(b > a || b != b) ? b : a", "y = a",
                              "-CUDART_INF", "max_doc_b")
    vmin = cp.ReductionKernel("float64 x", "float64 y", "x", "(b < a) ? b : a",
                              "y = a * 2 + 1", "CUDART_INF", "min_doc_c")
    np.testing.assert_array_equal(vmax(cp.asarray(x), axis=0).get(), x.max(axis=0))
    np.testing.assert_array_equal(vmin(cp.asarray(x), axis=1).get(), x.min(axis=1) * 2 + 1)
    x[2, 3] = np.nan
    assert np.isnan(vmax(cp.asarray(x), axis=1).get()[2])  # NaN wins, as numpy's max
    empty = cp.asarray(np.ones((3, 0)))  # a zero-size reduction gives the identity
    assert vmax(empty, axis=1).get().tolist() == [-np.inf] * 3


def test_reduction_kernel_broadcasts_inputs_takes_scalars_and_outputs():
    kernel = cp.ReductionKernel("T x, T t, float32 w", "T y, T z", "(x - t) * (x - t) * w",
                                "a + b", "y = a, z = a / 2", "0", "mse_doc_d")
    x, t = _rand(6, 5, dtype=np.float32), _rand(5, dtype=np.float32, seed=2)
    y = kernel(cp.asarray(x), cp.asarray(t), 3, axis=1)  # the first output alone
    want = ((x - t) ** 2 * 3).sum(axis=1)
    np.testing.assert_allclose(y.get(), want, rtol=1e-5)
    y, z = cp.empty(6, cp.float32), cp.empty(6, cp.float32)
    assert kernel(cp.asarray(x), cp.asarray(t), 3, y, z, axis=1) is y
    np.testing.assert_allclose(z.get(), want / 2, rtol=1e-5)
    out = cp.empty((1, 5), cp.float64)
    twice = cp.ReductionKernel("T x", "T y", "x", "a + b", "y = a * 2", "0", "sum2_doc_e")
    assert twice(cp.asarray(_rand(3, 5)), axis=0, keepdims=True, out=out) is out
    np.testing.assert_allclose(out.get(), _rand(3, 5).sum(0, keepdims=True) * 2)


def test_reduction_kernel_adds_in_cupys_order_not_numpys():
    """A block of threads folds each output element: the thread sums, then their tree,
    which rounds otherwise than numpy's pairwise sum of float32."""
    x = np.float32(1) + np.arange(64 * 1000, dtype=np.float32).reshape(64, 1000) * 1e-4
    kernel = cp.ReductionKernel("T x, T s", "T y", "x * s", "a + b", "y = a", "0",
                                "sum_doc_f")
    got = kernel(cp.asarray(x), cp.ones(1, cp.float32), axis=1).get()
    np.testing.assert_allclose(got, x.sum(axis=1), rtol=1e-6)
    assert not np.array_equal(got, x.sum(axis=1))  # another order of the same terms


def test_reduction_kernel_refuses_what_cupy_refuses():
    kernel = cp.ReductionKernel("float32 x, T y", "T z", "x * y", "a + b", "z = a", "0",
                                "dot_doc_g")
    x = cp.ones((2, 3), cp.float32)
    with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
        kernel(np.ones(3, np.float32), x)
    with pytest.raises(TypeError, match="Type is mismatched"):
        kernel(cp.ones(3, cp.float64), x)
    with pytest.raises(TypeError, match="Wrong number of arguments"):
        kernel(x)
    with pytest.raises(TypeError, match="Wrong arguments"):
        kernel(x, x, axes=0)
    with pytest.raises(ValueError, match="broadcast"):
        kernel(x, cp.ones(2, cp.float32))
    with pytest.raises(ValueError, match="Out shape is mismatched"):
        kernel(x, x, axis=1, out=cp.empty(3, cp.float32))
    with pytest.raises(ValueError, match="cannot specify 'out' as both"):
        kernel(x, x, cp.empty(2, cp.float32), axis=1, out=cp.empty(2, cp.float32))
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        kernel(x, x, axis=(1, -1))
    with pytest.raises(np.exceptions.AxisError if hasattr(np, "exceptions") else
                       np.AxisError):
        kernel(x, x, axis=2)
    with pytest.raises(ValueError, match="Loop size is undecided"):
        kernel(1.0, 2.0)
    with pytest.raises(ValueError, match="zero-size array to reduction operation"):
        cp.ReductionKernel("T x, T w", "T y", "x", "a + b", "y = a", None, "noid_doc_h")(
            cp.ones((2, 0)), cp.ones((2, 0)), axis=1)
    with pytest.raises(ValueError, match="Invalid kernel name"):
        cp.ReductionKernel("T x", "T y", "x", "a + b", "y = a", "0", "no-name")


def test_post_map_sees_outputs_and_scalars_but_not_input_arrays():
    """cupy binds input arrays inside its loop over the reduced elements only."""
    kernel = cp.ReductionKernel("T x, T s", "T y", "x", "a + b", "y = a + x", "0",
                                "scope_doc_i")
    with pytest.raises(cp.cuda.compiler.CompileException, match="x"):
        kernel(cp.ones((2, 3)), cp.ones(1), axis=1)
    scalar = cp.ReductionKernel("T x, T s", "T y", "x", "a + b", "y = a + s", "0",
                                "scope_doc_j")
    assert scalar(cp.ones((2, 3)), 0.5, axis=1).get().tolist() == [3.5, 3.5]


def test_a_call_cupy_runs_through_cub_is_refused():
    """One input and one output, contiguous, 128 elements or more an output: cupy
    hands it to CUB, whose full reductions apply post_map twice."""
    kernel = cp.ReductionKernel("T x", "T y", "x", "a + b", "y = a / 2", "0", "cub_doc_k")
    with pytest.raises(NotImplementedError, match="through CUB"):
        kernel(cp.ones(256))
    assert kernel(cp.ones(100)).get() == 50  # too few elements for CUB
    assert kernel(cp.ones((256, 3)), axis=0).get().tolist() == [128] * 3  # not at the end


def test_reduction_kernel_raw_params_are_indexed_by_the_expressions():
    """Raw arrays stay out of broadcasting: the map writes each square into a raw
    output at its C-order position (_J: the reduced index, _i: the kept one)."""
    kernel = cp.ReductionKernel("T x, raw T w", "T y, raw T sq",
                                "sq[_J * 3 + _i] = x * x * w[0]", "a + b", "y = a", "0",
                                "raw_doc_l")
    x, w, sq = cp.asarray(_rand(5, 3)), cp.asarray([2.0]), cp.empty((5, 3))
    y = kernel(x, w, cp.empty(3), sq, axis=0)
    np.testing.assert_allclose(y.get(), (x.get() ** 2 * 2).sum(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(sq.get(), x.get() * x.get() * 2)
    with pytest.raises(NotImplementedError, match="Illegal conditions"):
        kernel(x, w, cp.empty(5), sq, axis=1)  # cupy would move the reduced axis first
    with pytest.raises(ValueError, match="Output array size is Undecided"):
        kernel(x, w, axis=0)
