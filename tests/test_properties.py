"""Property tests: broadcasting, sum_to and broadcast_to on shapes hypothesis draws.

Derandomized, so every run checks the same examples (tests stay deterministic).
"""
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import dezero.functions as F  # noqa: E402
from dezero import Variable, utils  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, derandomize=True)
dims = st.integers(min_value=1, max_value=4)
shapes = st.lists(dims, min_size=0, max_size=4).map(tuple)


@st.composite
def broadcast_pairs(draw):
    """A shape and a second shape that broadcasts against it (some axes set to 1
    or dropped from the front)."""
    full = draw(shapes)
    keep = draw(st.integers(min_value=0, max_value=len(full)))
    partial = tuple(n if draw(st.booleans()) else 1 for n in full[len(full) - keep:])
    return full, partial


def _reference_sum_to(x, shape):
    # Sum over the leading axes, then over axes where shape has 1.
    lead = x.ndim - len(shape)
    y = x.sum(axis=tuple(range(lead))) if lead else x
    for axis, n in enumerate(shape):
        if n == 1:
            y = y.sum(axis=axis, keepdims=True)
    return y


@SETTINGS
@given(broadcast_pairs())
def test_sum_to_undoes_broadcasting(pair):
    full, partial = pair
    x = np.random.default_rng(0).standard_normal(full)
    np.testing.assert_allclose(utils.sum_to(x, partial), _reference_sum_to(x, partial))
    assert utils.sum_to(x, partial).shape == partial


@SETTINGS
@given(broadcast_pairs(), st.sampled_from(["add", "sub", "mul", "div"]))
def test_binary_op_gradients_have_their_input_shapes(pair, op):
    full, partial = pair
    rng = np.random.default_rng(1)
    a = Variable(rng.uniform(0.5, 2.0, size=full))
    b = Variable(rng.uniform(0.5, 2.0, size=partial))
    y = getattr(F, op)(a, b)
    assert y.shape == np.broadcast_shapes(full, partial)
    F.sum(y).backward()
    assert a.grad.shape == full and b.grad.shape == partial
    if op == "add":  # d(sum(a + b))/db counts how often each b element was used
        count = np.prod(full) // max(np.prod(partial), 1)
        np.testing.assert_allclose(b.grad.data, np.full(partial, count))


@SETTINGS
@given(broadcast_pairs())
def test_broadcast_to_and_sum_to_are_adjoint(pair):
    # <broadcast_to(x), g> == <x, sum_to(g)> for every x and g: the two are each
    # other's transpose, which is why each is the other's backward.
    full, partial = pair
    rng = np.random.default_rng(2)
    x = rng.standard_normal(partial)
    g = rng.standard_normal(full)
    left = np.sum(F.broadcast_to(Variable(x), full).data * g)
    right = np.sum(x * F.sum_to(Variable(g), partial).data)
    np.testing.assert_allclose(left, right, rtol=1e-10, atol=1e-12)
