"""The dynamic core: Variable's API, backward and its options, higher-order
derivatives, deep graphs, memory, the op registry and error messages."""
import gc
import threading
import weakref

import numpy as np
import pytest
from op_table import EXTRA_CALLS, ROWS

import dezero
import dezero.functions as F
from dezero import Config, Function, Parameter, Variable, cuda, no_grad, using_config
from dezero.core import OPS

# =============================================================================
# Variable: data, name, grad, creator, generation, array-like properties, repr
# =============================================================================


def test_data_is_assignable_and_type_checked():
    x = Variable(np.array([1.0, 2.0]))
    x.data = np.zeros(3)
    assert x.shape == (3,)
    x.data = None
    assert x.data is None
    x.data = np.float64(2.0)  # 0-d numpy arithmetic returns scalars; they are 0-d arrays
    assert isinstance(x.data, np.ndarray) and x.shape == () and x.data == 2.0
    for bad in (1.0, [1.0], "a"):
        with pytest.raises(TypeError, match=type(bad).__name__):
            x.data = bad
        with pytest.raises(TypeError, match=type(bad).__name__):
            Variable(bad)


def test_variable_has_slots():
    with pytest.raises(AttributeError):
        Variable(np.array(1.0)).anything = 1


def test_name_grad_creator_generation():
    x = Variable(np.array(1.0), name="x")
    assert x.name == "x" and x.grad is None and x.creator is None and x.generation == 0
    y = F.exp(F.sin(x))
    assert isinstance(y.creator, F.Exp) and y.generation == 2
    assert y.creator.inputs[0].creator.inputs[0] is x
    assert y.creator.outputs[0]() is y


def test_array_like_properties():
    x = Variable(np.zeros((2, 3, 4), dtype=np.float32))
    assert (x.shape, x.ndim, x.size, x.dtype, len(x)) == ((2, 3, 4), 3, 24, np.float32, 2)
    assert x.T.shape == (4, 3, 2)


def test_repr_is_multiline_aligned():
    assert repr(Variable(np.array(1.5))) == "variable(1.5)"
    assert repr(Variable(None)) == "variable(None)"
    assert repr(Variable(np.array([[1, 2], [3, 4]]))) == (
        "variable([[1 2]\n"
        "          [3 4]])")


def test_reshape_and_transpose_accept_varargs_or_tuple():
    x = Variable(np.arange(6.0))
    assert x.reshape(2, 3).shape == (2, 3)
    assert x.reshape((3, 2)).shape == (3, 2)
    assert x.reshape([1, 6]).shape == (1, 6)
    y = Variable(np.zeros((2, 3, 4)))
    assert y.transpose().shape == (4, 3, 2)
    assert y.transpose(1, 0, 2).shape == (3, 2, 4)
    assert y.transpose((2, 0, 1)).shape == (4, 2, 3)
    assert y.transpose(None).shape == (4, 3, 2)


def test_reduction_and_matmul_methods():
    x = Variable(np.array([[1.0, 5.0], [3.0, 2.0]]))
    np.testing.assert_array_equal(x.sum(axis=0).data, [4, 7])
    np.testing.assert_array_equal(x.sum(keepdims=True).data, [[11]])
    np.testing.assert_array_equal(x.max(axis=1).data, [5, 3])
    np.testing.assert_array_equal(x.min().data, 1)
    np.testing.assert_array_equal(x.matmul(x).data, x.data @ x.data)
    np.testing.assert_array_equal(x.dot(x).data, x.data @ x.data)


def test_parameter_is_a_variable():
    p = Parameter(np.array(1.0))
    assert isinstance(p, Variable)
    assert isinstance(p * 2, Variable) and not isinstance(p * 2, Parameter)


# =============================================================================
# Operators: reflected forms, ndarrays on either side, indexing, @
# =============================================================================


@pytest.mark.parametrize("expr, expected", [
    (lambda x: x + 1, [3, 5]), (lambda x: 1 + x, [3, 5]),
    (lambda x: x - 1, [1, 3]), (lambda x: 1 - x, [-1, -3]),
    (lambda x: x * 3, [6, 12]), (lambda x: 3 * x, [6, 12]),
    (lambda x: x / 2, [1, 2]), (lambda x: 8 / x, [4, 2]),
    (lambda x: x ** 2, [4, 16]), (lambda x: -x, [-2, -4]),
    (lambda x: x + np.array([1.0, 1.0]), [3, 5]), (lambda x: np.array([1.0, 1.0]) + x, [3, 5]),
    (lambda x: np.array([1.0, 1.0]) - x, [-1, -3]), (lambda x: np.array([8.0, 8.0]) / x, [4, 2]),
    (lambda x: np.array([3.0, 3.0]) * x, [6, 12]),
    (lambda x: x * x, [4, 16]), (lambda x: x[1], 4), (lambda x: x[::-1], [4, 2]),
])
def test_operators(expr, expected):
    x = Variable(np.array([2.0, 4.0]))
    y = expr(x)
    assert isinstance(y, Variable)
    np.testing.assert_allclose(y.data, expected)


def test_ndarray_on_the_left_dispatches_to_variable():
    x = Variable(np.array([2.0, 4.0]), name="x")
    y = np.array([1.0, 2.0]) * x
    assert isinstance(y, Variable)
    y.backward()
    np.testing.assert_array_equal(x.grad.data, [1, 2])


def test_matmul_operator_both_ways():
    W = Variable(np.arange(6.0).reshape(2, 3))
    a = np.ones((4, 2))
    y = a @ W
    assert isinstance(y, Variable) and y.shape == (4, 3)
    y.backward()
    np.testing.assert_array_equal(W.grad.data, np.full((2, 3), 4.0))
    z = W @ np.ones((3, 1))
    assert isinstance(z, Variable) and z.shape == (2, 1)


# =============================================================================
# backward: leaf, retain_grad, create_graph, no_grad, unchain
# =============================================================================


def test_backward_on_a_leaf_sets_grad_to_ones():
    x = Variable(np.array([1.0, 2.0], dtype=np.float32))
    x.backward()
    np.testing.assert_array_equal(x.grad.data, [1, 1])
    assert x.grad.dtype == np.float32


def test_gradients_accumulate_until_cleargrad():
    x = Variable(np.array(3.0))
    (x * x).backward()
    (x * x).backward()
    assert x.grad.data == 12.0
    x.cleargrad()
    (x + x).backward()
    assert x.grad.data == 2.0


def test_same_variable_used_many_times():
    x = Variable(np.array(3.0))
    y = x + x + x * x
    y.backward()
    assert x.grad.data == 2 + 2 * 3


def test_retain_grad_keeps_intermediate_gradients():
    x = Variable(np.array(2.0))
    a = F.square(x)
    y = F.exp(a)
    y.backward()
    assert a.grad is None and y.grad is None and x.grad is not None
    x.cleargrad()
    y = F.exp(F.square(x))
    a = y.creator.inputs[0]
    y.backward(retain_grad=True)
    assert np.isclose(a.grad.data, np.exp(4.0)) and y.grad.data == 1.0


def test_create_graph_off_leaves_gradients_without_graph():
    x = Variable(np.array(2.0))
    (x ** 3).backward()
    assert x.grad.creator is None
    x.cleargrad()
    (x ** 3).backward(create_graph=True)
    assert x.grad.creator is not None
    assert Config.enable_backprop is True


def test_tanh_fourth_derivative_matches_closed_form():
    x = Variable(np.linspace(-1.5, 1.5, 7))
    y = F.tanh(x)
    y.backward(create_graph=True)
    for _ in range(3):
        gx = x.grad
        x.cleargrad()
        gx.backward(create_graph=True)
    t = np.tanh(x.data)
    np.testing.assert_allclose(x.grad.data, 8 * t * (1 - t ** 2) * (2 - 3 * t ** 2),
                               rtol=1e-10, atol=1e-12)


def test_no_grad_links_nothing_and_restores_the_flag():
    x = Variable(np.array(2.0))
    with no_grad():
        y = x * 2
        assert Config.enable_backprop is False
    assert Config.enable_backprop is True
    assert y.creator is None and y.generation == 0
    with using_config("train", False):
        assert Config.train is False
    assert Config.train is True
    with dezero.test_mode():
        assert Config.train is False


def test_config_is_restored_after_an_error():
    with pytest.raises(ZeroDivisionError):
        with no_grad():
            1 / 0
    assert Config.enable_backprop is True


def test_unchain_and_unchain_backward():
    x = Variable(np.array(1.0))
    a = F.sin(x)
    b = F.cos(a)
    y = F.exp(b)
    y.unchain_backward()
    assert y.creator is not None  # the output keeps its own creator
    assert b.creator is None and a.creator is None
    y.backward()
    assert b.grad is not None and x.grad is None  # b is a leaf now: the cut
    y.unchain()
    assert y.creator is None


def test_multi_output_function_gets_none_for_unused_output():
    class Split(Function):
        def forward(self, x):
            return x[0], x[1]

        def backward(self, g0, g1):
            assert g1 is None  # the second output received no gradient
            return F.GetItemGrad(0, (2,))(g0)

    x = Variable(np.array([1.0, 2.0]))
    a, _ = Split()(x)
    a.backward()
    np.testing.assert_array_equal(x.grad.data, [1, 0])


# =============================================================================
# Deep graphs and memory
# =============================================================================


def test_deep_chain_backward_and_deletion_do_not_recurse():
    # In a thread with a 512 KiB C stack, so that 20,000 links are deep enough:
    # a recursive backward passes Python's limit of 1,000 frames, and freeing the
    # chain recursively would need far more C stack (a crash, not an error).
    results = []

    def build_backward_and_free():
        x = Variable(np.array(1.0))
        y = x
        for _ in range(20_000):
            y = y + 1e-5
        y.backward()
        results.append((x.grad.data.item(), y.data.item()))
        del y
        results.append(x.grad.data.item())

    threading.stack_size(1 << 19)
    try:
        thread = threading.Thread(target=build_backward_and_free)
        thread.start()
    finally:
        threading.stack_size(0)
    thread.join()
    assert results[0][0] == 1.0 and np.isclose(results[0][1], 1.2)
    assert results[1] == 1.0


def test_graph_is_freed_when_no_reference_is_left():
    gc.collect()
    gc.disable()  # reference counting alone must free it: no cycles
    try:
        x = Variable(np.ones(3))
        y = F.sum(F.tanh(x) * x)
        f = weakref.ref(y.creator)
        middle = weakref.ref(y.creator.inputs[0])
        y.backward()
        del y
        assert f() is None and middle() is None
    finally:
        gc.enable()


def test_higher_order_graph_is_collectable():
    x = Variable(np.ones(3))
    y = F.sum(F.tanh(x) * x)
    y.backward(create_graph=True)
    f = weakref.ref(y.creator)
    del y
    x.cleargrad()
    gc.collect()
    assert f() is None


# =============================================================================
# The op registry: every op rebuilds from its attrs
# =============================================================================


def _functions_behind(outputs):
    funcs, todo = {}, [v.creator for v in outputs if v is not None and v.creator is not None]
    while todo:
        f = todo.pop()
        if id(f) in funcs:
            continue
        funcs[id(f)] = f
        todo.extend(x.creator for x in f.inputs if x.creator is not None)
    return funcs.values()


def _called_instances():
    """One called instance per op name, from the op table's forward, backward and
    double backward, plus EXTRA_CALLS for ops the table does not reach."""
    found = {}
    calls = [lambda row=row: row.fn(*[Variable(a) for a in row.inputs()]) for row in ROWS]
    calls += list(EXTRA_CALLS.values())
    for call in calls:
        y = call()
        leaves = [x for f in _functions_behind([y]) for x in f.inputs if x.creator is None]
        F.sum(y).backward(create_graph=True)
        grads = [x.grad for x in leaves]
        for f in _functions_behind([y] + grads):
            found.setdefault(f.op_name, f)
        for g in grads:
            if g is not None and g.creator is not None:
                for x in leaves:
                    x.cleargrad()
                F.sum(g).backward(create_graph=True)
                for f in _functions_behind([x.grad for x in leaves]):
                    found.setdefault(f.op_name, f)
    return found


CALLED = _called_instances()


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_registered_op_rebuilds_from_its_attrs(name):
    cls = OPS[name]
    if not cls.__module__.startswith("dezero"):
        pytest.skip("an op defined by a test")
    assert name in CALLED, (
        f"op {name!r} ({cls.__module__}.{cls.__name__}) is never called by the op tests; "
        f"add a row to ROWS or an entry to EXTRA_CALLS in tests/op_table.py")
    f = CALLED[name]
    rebuilt = type(f)(**f.attrs)
    assert type(rebuilt) is type(f)
    assert repr(rebuilt) == repr(f)
    assert all(k not in f.attrs for k in ("inputs", "outputs", "generation"))


def test_op_names_are_snake_case_of_the_class():
    assert OPS["get_item"] is F.GetItem and OPS["broadcast_to"] is F.BroadcastTo
    assert OPS["matmul"] is F.MatMul and F.MatMul.op_name == "matmul"


def test_user_ops_are_namespaced():
    class Twice(Function):
        def forward(self, x):
            return 2 * x

    assert Twice.op_name.endswith("Twice") and "." in Twice.op_name
    assert OPS[Twice.op_name] is Twice


# =============================================================================
# Errors: shapes and op names, devices
# =============================================================================


def test_shape_error_names_the_op_and_both_shapes():
    with pytest.raises(ValueError) as info:
        Variable(np.ones((2, 3))) + Variable(np.ones(4))
    message = str(info.value)
    assert message.startswith("add:") and "(2, 3)" in message and "(4,)" in message


def test_reshape_and_index_errors_name_the_op():
    with pytest.raises(ValueError, match=r"^reshape:.*\(2, 3\)"):
        F.reshape(Variable(np.ones((2, 3))), (4, 2))
    with pytest.raises(IndexError, match=r"^get_item:.*\(2, 3\)"):
        Variable(np.ones((2, 3)))[5]


NON_NUMERIC = [
    ("sin", lambda: F.sin(None), "input 0 is None"),
    ("sin", lambda: F.sin("abc"), "input 0 is 'abc'"),
    ("sin", lambda: F.sin([1.0, 2.0]), "input 0 is [1.0, 2.0]"),
    ("add", lambda: Variable(np.ones(2)) + None, "input 1 is None"),
    ("mul", lambda: None * Variable(np.ones(2)), "input 1 is None"),
    ("add", lambda: Variable(np.ones(2)) + "a", "input 1 is an array of dtype <U1"),
    ("exp", lambda: F.exp(np.array(["a", "b"])), "input 0 is an array of dtype <U1"),
    ("exp", lambda: F.exp(Variable(np.array([object(), 1]))), "dtype object"),
    ("exp", lambda: F.exp(Variable(None)), "input 0 is None"),
    ("matmul", lambda: F.matmul(np.ones((2, 2)), np.array([["a"], ["b"]])), "input 1"),
]


@pytest.mark.parametrize("op, call, what", NON_NUMERIC, ids=[w for _, _, w in NON_NUMERIC])
def test_strings_objects_and_none_name_the_op_and_the_fix(op, call, what):
    # numpy alone says "loop of ufunc does not support argument 0", naming no op.
    with pytest.raises(TypeError) as info:
        call()
    message = str(info.value)
    assert message.startswith(f"{op}: ") and what in message
    assert "np.asarray(x, dtype=np.float32)" in message


def test_a_type_error_of_numeric_inputs_is_left_as_it_is():
    class Fails(Function):
        def forward(self, x):
            raise TypeError("the op's own message")
    with pytest.raises(TypeError, match="^the op's own message$"):
        Fails()(np.ones(2))


def test_to_cpu_keeps_numpy_and_to_gpu_is_clear_without_cupy():
    x = Variable(np.ones(2))
    x.to_cpu()
    assert isinstance(x.data, np.ndarray)
    if cuda.gpu_enable:
        pytest.skip("cupy finds a GPU")
    with pytest.raises(RuntimeError, match=r"Variable.to_gpu\(\) needs a GPU, and dezero has "
                       r"none: CuPy is (not installed|installed but).*\n  fix: "):
        x.to_gpu()


def test_scalar_operands_are_made_once_read_only_and_keep_signed_zero():
    x = Variable(np.array([1.0, -2.0], dtype=np.float32))
    a, b = (x * 3.0).creator.inputs[1], (x * 3).creator.inputs[1]
    assert a.data is b.data and a.dtype == np.float32
    assert not a.data.flags.writeable
    y = x * -0.0
    assert np.signbit(y.data[0]) and not np.signbit(y.data[1])


@pytest.mark.parametrize("dtype, other", [(np.float32, np.float64), (np.float64, np.float32),
                                          (np.float16, np.float32)])
def test_a_gradient_has_its_variables_dtype_whatever_the_variable_met(dtype, other):
    # A float64 batch into float32 weights: the weights' gradient stays float32
    # (PyTorch's rule), the float64 gradient rounded once.
    rng = np.random.default_rng(0)
    W = Parameter(rng.standard_normal((3, 2)).astype(dtype))
    x = Variable(rng.standard_normal((4, 3)).astype(other))
    y = F.sum(F.tanh(F.matmul(x, W)))
    assert y.dtype == np.result_type(dtype, other)
    y.backward(create_graph=True)
    assert W.grad.dtype == dtype and x.grad.dtype == other
    wide = np.result_type(dtype, other)
    ref = x.data.astype(wide).T @ (1 - np.tanh(x.data.astype(wide) @ W.data.astype(wide)) ** 2)
    np.testing.assert_array_equal(W.grad.data, ref.astype(dtype))
    gW = W.grad
    W.cleargrad()
    F.sum(gW * gW).backward()  # the cast is part of the graph: double backprop works
    assert W.grad.dtype == dtype


def test_integer_inputs_get_no_cast_gradient():
    x = Variable(np.array([1.0, 2.0]))
    t = Variable(np.array([1, 2]))
    (x * t).backward()
    assert x.grad.dtype == np.float64
