"""Neural-network functions of dezero.functions: activations, losses, metrics,
dropout, batch_norm, embed_id and the teaching *_simple variants.

Gradients are checked numerically in float64 (and once more for the gradient of
the gradient); values are compared against PyTorch where it is installed.
"""
import doctest
import warnings

import numpy as np
import pytest
from backend_helpers import assert_within_ulps
from grad_helpers import gradient_of, rng, weights

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.utils import gradient_check


def away_from_zero(shape, seed=0):
    # relu-like kinks at 0 would spoil central differences.
    x = rng(seed).uniform(0.1, 1.0, shape) * rng(seed + 1).choice([-1, 1], shape)
    return x


def c(a, x):
    """A constant operand in x's dtype, so that float32 cases stay float32."""
    return np.asarray(a).astype(x.dtype)


LABELS = np.array([0, 2, 1, 2])
TARGETS = np.array([[0, 1], [1, 1], [0, 0], [1, 0]])


def running_stats(n, dtype=np.float64, seed=5):
    r = rng(seed)
    return (Variable(r.randn(n).astype(dtype)),
            Variable(r.uniform(0.5, 1.5, n).astype(dtype)))


def bn_train(x, seed=3):
    r = rng(seed)
    n = x.shape[1]
    mean, var = running_stats(n, x.dtype)
    return F.batch_norm(x, c(r.randn(n), x), c(r.randn(n), x), mean, var)


def bn_test(x, seed=3):
    r = rng(seed)
    n = x.shape[1]
    mean, var = running_stats(n, x.dtype)
    with dezero.test_mode():
        return F.batch_norm(x, c(r.randn(n), x), c(r.randn(n), x), mean, var)


# name -> (function of one differentiable input, input)
CASES = {
    "sigmoid": (F.sigmoid, rng().randn(3, 4) * 3),
    "relu": (F.relu, away_from_zero((3, 4))),
    "leaky_relu": (lambda x: F.leaky_relu(x, slope=0.1), away_from_zero((3, 4))),
    "softmax_axis1": (F.softmax, rng().randn(3, 4)),
    "softmax_axis0": (lambda x: F.softmax(x, axis=0) * c(np.arange(4.0), x), rng().randn(3, 4)),
    "log_softmax": (lambda x: F.log_softmax(x) * c(np.arange(4.0), x), rng().randn(3, 4)),
    "softplus": (F.softplus, rng().randn(3, 4) * 3),
    "softmax_cross_entropy": (lambda x: F.softmax_cross_entropy(x, LABELS), rng().randn(4, 3)),
    "sigmoid_cross_entropy": (lambda x: F.sigmoid_cross_entropy(x, TARGETS), rng().randn(4, 2)),
    "binary_cross_entropy": (lambda p: F.binary_cross_entropy(p, TARGETS),
                             rng().uniform(0.1, 0.9, (4, 2))),
    "mean_squared_error_x0": (lambda x: F.mean_squared_error(x, c(weights(1, (4, 2)), x)),
                              rng().randn(4, 2)),
    "mean_squared_error_x1": (lambda x: F.mean_squared_error(c(weights(1, (4, 2)), x), x),
                              rng().randn(4, 2)),
    "batch_norm_train_2d": (lambda x: bn_train(x) * c(weights(7, (5, 3)), x), rng().randn(5, 3)),
    "batch_norm_train_4d": (lambda x: bn_train(x) * c(weights(7, (2, 3, 2, 2)), x),
                            rng().randn(2, 3, 2, 2)),
    "batch_norm_test_4d": (lambda x: bn_test(x) * c(weights(7, (2, 3, 2, 2)), x),
                           rng().randn(2, 3, 2, 2)),
    "batch_norm_gamma": (lambda g: F.batch_norm(c(weights(2, (5, 3)), g), g, c(np.zeros(3), g),
                                                *running_stats(3, g.dtype))
                         * c(weights(7, (5, 3)), g),
                         rng().randn(3)),
    "batch_norm_beta": (lambda b: F.batch_norm(c(weights(2, (5, 3)), b), c(np.ones(3), b), b,
                                               *running_stats(3, b.dtype))
                        * c(weights(7, (5, 3)), b),
                        rng().randn(3)),
    "embed_id": (lambda W: F.embed_id(np.array([[0, 2], [2, 2]]), W) * c(weights(7, (2, 2, 3)), W),
                 rng().randn(4, 3)),
    "sigmoid_simple": (F.sigmoid_simple, rng().randn(3, 4)),
    "softmax_simple": (lambda x: F.softmax_simple(x) * c(np.arange(4.0), x), rng().randn(3, 4)),
    "softmax_cross_entropy_simple": (lambda x: F.softmax_cross_entropy_simple(x, LABELS),
                                     rng().randn(4, 3)),
    "mean_squared_error_simple": (lambda x: F.mean_squared_error_simple(x, c(np.ones((4, 2)), x)),
                                  rng().randn(4, 2)),
    "linear_simple": (lambda x: F.linear_simple(x, c(weights(1, (3, 2)), x),
                                                    c(weights(2, (2,)), x)),
                      rng().randn(4, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_numerical(name):
    f, x = CASES[name]
    assert gradient_check(f, x)


# Not for ops linear in their input (relu, batch_norm in test mode, embed_id): their
# gradient does not depend on the input, so there is nothing to differentiate.
DOUBLE = ["sigmoid", "softmax_axis1", "softmax_axis0", "log_softmax", "softplus",
          "softmax_cross_entropy", "sigmoid_cross_entropy", "binary_cross_entropy",
          "mean_squared_error_x0", "batch_norm_train_2d", "batch_norm_train_4d"]


@pytest.mark.parametrize("name", DOUBLE)
def test_gradient_of_gradient_matches_numerical(name):
    f, x = CASES[name]
    assert gradient_check(gradient_of(f), x, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_stays_float32(name):
    f, x = CASES[name]
    x = Variable(x.astype(np.float32))
    y = f(x)
    assert y.dtype == np.float32
    F.sum(y).backward()
    assert x.grad.dtype == np.float32


def test_doc_examples_run():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    names = ["sigmoid", "relu", "leaky_relu", "softmax", "log_softmax", "softplus",
             "softmax_cross_entropy", "sigmoid_cross_entropy", "binary_cross_entropy",
             "mean_squared_error", "accuracy", "dropout", "batch_norm", "embed_id"]
    for name in names:
        for test in finder.find(getattr(F, name), name, globs={"np": np, "dezero": dezero,
                                                                **vars(F)}):
            runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    assert runner.summarize(verbose=False).attempted >= len(names)


# =============================================================================
# Activations
# =============================================================================


def test_sigmoid_values_and_no_overflow():
    x = np.array([-1000.0, -2.0, 0.0, 3.0, 1000.0], dtype=np.float32)
    with np.errstate(over="raise"):
        y = F.sigmoid(x).data
    with np.errstate(over="ignore"):
        expected = 1 / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(y, expected, atol=1e-7)
    assert F.Sigmoid.cpp is not None


def test_relu_and_leaky_relu_values():
    x = np.array([-2.0, 0.0, 3.0])
    np.testing.assert_array_equal(F.relu(x).data, [0.0, 0.0, 3.0])
    np.testing.assert_allclose(F.leaky_relu(x).data, [-0.4, 0.0, 3.0])
    np.testing.assert_allclose(F.leaky_relu(x, slope=0.5).data, [-1.0, 0.0, 3.0])
    assert F.ReLU.op_name == "relu" and F.LeakyReLU.op_name == "leaky_relu"


def test_softmax_and_log_softmax_match_torch_with_large_logits(torch):
    x = rng().randn(4, 5) * 3
    x[0] += 1000.0
    x[1, 2] = -1000.0
    for axis in (0, 1):
        for dezero_f, torch_f in ((F.softmax, torch.softmax),
                                  (F.log_softmax, torch.log_softmax)):
            xv = Variable(x.copy())
            w = rng(1).randn(4, 5)
            y = dezero_f(xv, axis=axis)
            F.sum(y * w).backward()
            xt = torch.tensor(x, requires_grad=True)
            yt = torch_f(xt, dim=axis)
            (yt * torch.tensor(w)).sum().backward()
            np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(xv.grad.data, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
            assert np.all(np.isfinite(y.data)) and np.all(np.isfinite(xv.grad.data))


# name -> (dezero, torch) on float32 logits (N, C) and labels t
LARGE_LOGITS = {
    "log_softmax": (lambda x, t: F.log_softmax(x),
                    lambda torch, x, t: torch.log_softmax(x, dim=1)),
    "softmax_cross_entropy": (F.softmax_cross_entropy,
                              lambda torch, x, t: torch.nn.functional.cross_entropy(x, t)),
    "softmax_cross_entropy_simple": (F.softmax_cross_entropy_simple,
                                     lambda torch, x, t: torch.nn.functional.cross_entropy(x,
                                                                                           t)),
}


@pytest.mark.parametrize("offset", [1e5, -1e5, 3e6])
@pytest.mark.parametrize("name", LARGE_LOGITS)
def test_log_softmax_keeps_float32_precision_for_large_logits(name, offset, torch):
    # m + log(s) rounded to float32 near 1e5 is off by up to 0.004: the max must be
    # subtracted before the log of the sum is.
    fn, torch_fn = LARGE_LOGITS[name]
    x = (rng().randn(6, 5) * 3 + offset).astype(np.float32)
    t = np.array([0, 1, 2, 3, 4, 0])
    y = fn(Variable(x), t)
    want = torch_fn(torch, torch.tensor(x), torch.tensor(t)).numpy()
    assert y.dtype == np.float32
    # what is rounded: the logits less their row's max, and the log of a sum of 5 terms
    # of at most 1 (torch's exp and log are not numpy's)
    scale = np.max(np.abs(x - x.max(axis=1, keepdims=True))) + np.log(5)
    assert_within_ulps(y.data, want, scale)


# =============================================================================
# Losses
# =============================================================================


def test_softmax_cross_entropy_matches_torch_and_stays_float32(torch):
    x = (rng().randn(6, 4) * 2).astype(np.float32)
    x[0] = [1000.0, -1000.0, 0.0, 999.0]  # large logits must not overflow
    t = np.array([3, 0, 1, 2, 2, 0], dtype=np.int64)
    xv = Variable(x.copy())
    loss = F.softmax_cross_entropy(xv, t)
    loss.backward()
    xt = torch.tensor(x, requires_grad=True)
    lt = torch.nn.functional.cross_entropy(xt, torch.tensor(t))
    lt.backward()
    assert loss.dtype == np.float32 and xv.grad.dtype == np.float32
    np.testing.assert_allclose(loss.data, lt.item(), rtol=1e-5)
    np.testing.assert_allclose(xv.grad.data, xt.grad.numpy(), rtol=1e-5, atol=1e-7)


def test_softmax_cross_entropy_accepts_column_labels_and_rejects_bad_ones():
    x = rng().randn(4, 3)
    a = F.softmax_cross_entropy(x, LABELS).data
    b = F.softmax_cross_entropy(x, LABELS.reshape(4, 1)).data
    assert a == b
    with pytest.raises(ValueError, match="4 rows of scores but 3 labels"):
        F.softmax_cross_entropy(x, LABELS[:3])
    with pytest.raises(TypeError, match="integer class labels"):
        F.softmax_cross_entropy(x, LABELS.astype(np.float64))


# op -> call with 3 classes (or 3 rows of W) and ids t; a negative id used to pick the
# last class, one past the end an unnamed numpy IndexError.
CLASS_ID_OPS = {
    "softmax_cross_entropy": lambda t: F.softmax_cross_entropy(rng().randn(2, 3), t),
    "softmax_cross_entropy_simple": lambda t: F.softmax_cross_entropy_simple(
        rng().randn(2, 3), t),
    "accuracy": lambda t: F.accuracy(rng().randn(2, 3), t),
    "embed_id": lambda t: F.embed_id(t, rng().randn(3, 4)),
}


@pytest.mark.parametrize("bad", [-1, 3, 7])
@pytest.mark.parametrize("op", sorted(CLASS_ID_OPS))
def test_class_ids_out_of_range_name_the_op_the_id_and_the_classes(op, bad):
    with pytest.raises(IndexError, match=rf"{op}: id {bad} is out of range for 3 .*0\.\.2"):
        CLASS_ID_OPS[op](np.array([0, bad]))
    CLASS_ID_OPS[op](np.array([0, 2]))  # the last class is fine


def test_softmax_cross_entropy_gives_no_gradient_to_labels():
    t = Variable(LABELS)
    x = Variable(rng().randn(4, 3))
    F.softmax_cross_entropy(x, t).backward()
    assert t.grad is None and x.grad is not None


def test_sigmoid_cross_entropy_matches_torch_with_large_logits(torch):
    x = rng().randn(5, 3) * 3
    x[0] = [500.0, -500.0, 0.0]
    t = rng(1).randint(0, 2, (5, 3))
    xv = Variable(x.copy())
    loss = F.sigmoid_cross_entropy(xv, t)
    loss.backward()
    xt = torch.tensor(x, requires_grad=True)
    # The book divides the sum by N = len(x), not by the number of elements.
    lt = torch.nn.functional.binary_cross_entropy_with_logits(
        xt, torch.tensor(t, dtype=torch.float64), reduction="sum") / len(x)
    lt.backward()
    np.testing.assert_allclose(loss.data, lt.item(), rtol=1e-10)
    np.testing.assert_allclose(xv.grad.data, xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_sigmoid_cross_entropy_reshapes_flat_labels_for_column_logits():
    x = rng().randn(4, 1)
    t = np.array([0, 1, 1, 0])
    assert F.sigmoid_cross_entropy(x, t).data == F.sigmoid_cross_entropy(x, t[:, None]).data
    with pytest.raises(ValueError, match="sigmoid_cross_entropy"):
        F.sigmoid_cross_entropy(x, np.zeros((2, 2)))


def test_binary_cross_entropy_matches_torch_and_is_finite_at_0_and_1(torch):
    p = rng().uniform(0.05, 0.95, (5, 3))
    t = rng(1).randint(0, 2, (5, 3)).astype(np.float64)
    pv = Variable(p.copy())
    loss = F.binary_cross_entropy(pv, t)
    loss.backward()
    pt = torch.tensor(p, requires_grad=True)
    lt = torch.nn.functional.binary_cross_entropy(pt, torch.tensor(t), reduction="sum") / 5
    lt.backward()
    np.testing.assert_allclose(loss.data, lt.item(), rtol=1e-10)
    np.testing.assert_allclose(pv.grad.data, pt.grad.numpy(), rtol=1e-10)
    edge = F.binary_cross_entropy(np.array([0.0, 1.0]), np.array([1, 0]))
    assert np.isfinite(edge.data) and edge.data > 30


def test_mean_squared_error_value_float32_and_shape_mismatch():
    x0 = np.array([[1.0], [2.0], [4.0]], dtype=np.float32)
    x1 = np.zeros((3, 1), dtype=np.float32)
    y = F.mean_squared_error(x0, x1)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.data, 21.0 / 3)
    with pytest.raises(ValueError, match=r"\(3, 1\).*\(3,\).*reshape"):
        F.mean_squared_error(x0, np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="mean_squared_error_simple"):
        F.mean_squared_error_simple(x0, np.zeros(3))


def test_mean_squared_error_pairs_shapes_that_differ_only_by_unit_axes():
    # The book's RNN example compares a prediction (1, 1) with a target (1,).
    y = Variable(np.array([[2.0]]))
    loss = F.mean_squared_error(y, np.array([0.5]))
    loss.backward()
    np.testing.assert_allclose(loss.data, 2.25)
    np.testing.assert_allclose(y.grad.data, [[3.0]])
    assert F.mean_squared_error_simple(y, np.array([0.5])).data == 2.25


# name -> (loss, integer inputs); the float64 versions of the same inputs are the
# reference. A scale 1 / N cast to an integer dtype gave a loss of 0.
INTEGER_INPUTS = {
    "mean_squared_error": (F.mean_squared_error, [[1], [3]], [[0], [0]]),
    "mean_squared_error_simple": (F.mean_squared_error_simple, [[1], [3]], [[0], [0]]),
    "softmax_cross_entropy": (F.softmax_cross_entropy, [[1, 2], [3, 0]], None),
    "softmax_cross_entropy_simple": (F.softmax_cross_entropy_simple, [[1, 2], [3, 0]], None),
    "sigmoid_cross_entropy": (F.sigmoid_cross_entropy, [[1], [-2]], [0, 1]),
    "binary_cross_entropy": (F.binary_cross_entropy, [[1], [0]], [0, 1]),
}


@pytest.mark.parametrize("name", sorted(INTEGER_INPUTS))
def test_losses_of_integer_inputs_are_computed_in_floating_point(name):
    loss, x, t = INTEGER_INPUTS[name]
    t = np.array([0, 1]) if t is None else np.array(t)  # class labels stay integers
    got = loss(np.array(x), t)
    want = loss(np.array(x, dtype=np.float64),
                t if "softmax" in name else t.astype(np.float64))
    assert got.dtype == np.float64 and float(got.data) > 0
    np.testing.assert_allclose(got.data, want.data, rtol=1e-12)


def test_integer_targets_keep_a_float32_loss_float32():
    x = Variable(np.array([[1.0], [3.0]], dtype=np.float32))
    loss = F.mean_squared_error(x, np.array([[0], [0]]))
    loss.backward()
    assert loss.dtype == x.grad.dtype == np.float32 and float(loss.data) == 5.0
    assert F.binary_cross_entropy(x * 0.25, np.array([[0], [1]])).dtype == np.float32


# name -> (loss, x, t) for a batch of N = 0 examples. As in PyTorch, the mean of no
# losses is NaN and the gradient is empty; 1 / N was a ZeroDivisionError.
EMPTY_BATCH = {
    "softmax_cross_entropy": (F.softmax_cross_entropy, np.zeros((0, 3)), np.zeros(0, int)),
    "softmax_cross_entropy_simple": (F.softmax_cross_entropy_simple, np.zeros((0, 3)),
                                     np.zeros(0, int)),
    "mean_squared_error": (F.mean_squared_error, np.zeros((0, 2)), np.zeros((0, 2))),
    "mean_squared_error_simple": (F.mean_squared_error_simple, np.zeros((0, 2)),
                                  np.zeros((0, 2))),
    "sigmoid_cross_entropy": (F.sigmoid_cross_entropy, np.zeros((0, 1)), np.zeros((0, 1))),
    "binary_cross_entropy": (F.binary_cross_entropy, np.zeros((0, 1)), np.zeros((0, 1))),
}


@pytest.mark.parametrize("name", sorted(EMPTY_BATCH))
def test_losses_of_an_empty_batch_are_nan_with_an_empty_gradient(name):
    loss, x, t = EMPTY_BATCH[name]
    x = Variable(x)
    y = loss(x, t)
    y.backward()
    assert y.shape == () and np.isnan(y.data)
    assert x.grad.shape == x.shape


def test_torch_gives_nan_for_an_empty_batch_too(torch):
    assert torch.isnan(torch.nn.functional.cross_entropy(
        torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)))


def test_an_empty_batch_gives_a_linear_layer_a_zero_gradient():
    x, W = np.zeros((0, 4)), Variable(rng(1).randn(4, 3))
    F.softmax_cross_entropy(F.linear(x, W), np.zeros(0, int)).backward()
    assert W.grad.shape == W.shape and not W.grad.data.any()


@pytest.mark.parametrize("name", ["mean_squared_error", "mean_squared_error_simple"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mean_squared_error_of_0d_inputs_is_the_squared_difference(name, dtype):
    # len() of a 0-d array was a TypeError; a 0-d input is one example (PyTorch's mse_loss).
    x0, x1 = Variable(np.array(3.0, dtype)), Variable(np.array(1.0, dtype))
    y = getattr(F, name)(x0, x1)
    y.backward()
    assert y.data == 4.0 and y.dtype == dtype
    assert x0.grad.data == 4.0 and x1.grad.data == -4.0


def test_torch_mse_loss_of_0d_inputs_is_the_squared_difference_too(torch):
    assert torch.nn.functional.mse_loss(torch.tensor(3.0), torch.tensor(1.0)).item() == 4.0


def test_cross_entropies_of_0d_inputs_are_one_example():
    assert np.isclose(F.sigmoid_cross_entropy(np.array(0.0), np.array(1)).data, np.log(2))
    assert np.isclose(F.binary_cross_entropy(np.array(0.5), np.array(1)).data, np.log(2))


def test_simple_versions_agree_with_the_fused_ones():
    x = rng().randn(4, 3)
    pairs = [(F.sigmoid_simple(x), F.sigmoid(x)), (F.softmax_simple(x), F.softmax(x)),
             (F.softmax_cross_entropy_simple(x, LABELS), F.softmax_cross_entropy(x, LABELS)),
             (F.mean_squared_error_simple(x, x * 2), F.mean_squared_error(x, x * 2))]
    for a, b in pairs:
        np.testing.assert_allclose(a.data, b.data, rtol=1e-12)
    W, b = rng(1).randn(3, 2), rng(2).randn(2)
    np.testing.assert_allclose(F.linear_simple(x, W, b).data, x @ W + b)
    np.testing.assert_allclose(F.linear_simple(x, W).data, x @ W)


# =============================================================================
# accuracy, dropout
# =============================================================================


def test_accuracy_values_and_zero_gradient():
    y = np.array([[0.1, 0.8, 0.1], [0.9, 0.05, 0.05], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    acc = F.accuracy(y, np.array([1, 0, 0, 0]))
    assert isinstance(acc, Variable)
    assert float(acc.data) == 0.75
    assert float(F.accuracy(Variable(y), np.array([[1], [0], [2], [0]])).data) == 1.0
    assert F.accuracy(y.astype(np.float32), np.array([2, 2, 2, 2])).dtype == np.float32
    yv = Variable(y)
    F.accuracy(yv, np.array([1, 0, 0, 0])).backward()
    assert yv.grad is None  # piecewise constant: no gradient reaches y


def test_dropout_mask_values_gradient_and_fresh_masks():
    x = Variable(np.ones((200, 50), dtype=np.float32))
    y1 = F.dropout(x, dropout_ratio=0.3)
    assert y1.dtype == np.float32
    values = set(np.unique(y1.data).tolist())
    assert values <= {0.0, np.float32(1 / 0.7)} and len(values) == 2
    # The scale keeps the mean: 10000 draws put it within a few percent of 1.
    assert abs(float(y1.data.mean()) - 1.0) < 0.05
    assert abs(float((y1.data == 0).mean()) - 0.3) < 0.03
    y1.backward()
    np.testing.assert_array_equal(x.grad.data, y1.data)  # dy/dx is the mask
    y2 = F.dropout(x, dropout_ratio=0.3)
    assert not np.array_equal(y1.data, y2.data)
    assert F.DropoutMask.random


def test_dropout_is_identity_in_test_mode_and_checks_ratio():
    x = Variable(rng().randn(3, 4))
    with dezero.test_mode():
        y = F.dropout(x)
    np.testing.assert_array_equal(y.data, x.data)
    with pytest.raises(ValueError, match="dropout_ratio"):
        F.dropout(x, 1.0)


# =============================================================================
# batch_norm, embed_id
# =============================================================================


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 2, 2)])
def test_batch_norm_train_and_running_stats_match_torch(shape, torch):
    r = rng()
    c = shape[1]
    gamma, beta = r.randn(c), r.randn(c)
    mean, var = Variable(np.zeros(c)), Variable(np.ones(c))
    t_mean, t_var = torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)
    for step in range(4):
        x = r.randn(*shape) * (step + 1) + step
        w = r.randn(*shape)
        xv, gv, bv = Variable(x), Variable(gamma), Variable(beta)
        y = F.batch_norm(xv, gv, bv, mean, var, decay=0.8, eps=1e-5)
        F.sum(y * w).backward()
        xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
        # torch's momentum weighs the new value: momentum = 1 - decay. Both update
        # the running variance with the unbiased batch variance.
        yt = torch.nn.functional.batch_norm(xt, t_mean, t_var, gt, bt, training=True,
                                            momentum=0.2, eps=1e-5)
        (yt * torch.tensor(w)).sum().backward()
        np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-8, atol=1e-10)
        for got, want in ((xv, xt), (gv, gt), (bv, bt)):
            np.testing.assert_allclose(got.grad.data, want.grad.numpy(), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(mean.data, t_mean.numpy(), rtol=1e-10)
        np.testing.assert_allclose(var.data, t_var.numpy(), rtol=1e-10)

    x = r.randn(*shape)
    with dezero.test_mode():
        y = F.batch_norm(x, gamma, beta, mean, var, eps=1e-5)
    before = mean.data.copy()
    yt = torch.nn.functional.batch_norm(torch.tensor(x), t_mean, t_var, torch.tensor(gamma),
                                        torch.tensor(beta), training=False, eps=1e-5)
    np.testing.assert_allclose(y.data, yt.numpy(), rtol=1e-8, atol=1e-10)
    np.testing.assert_array_equal(mean.data, before)  # test mode leaves them alone


def test_batch_norm_assigns_new_running_stats_and_keeps_float32():
    x = Variable(rng().randn(6, 2).astype(np.float32))
    mean = Variable(np.zeros(2, dtype=np.float32))
    var = Variable(np.ones(2, dtype=np.float32))
    old_mean_array = mean.data
    y = F.batch_norm(x, np.ones(2, np.float32), np.zeros(2, np.float32), mean, var)
    assert mean.data is not old_mean_array and old_mean_array.tolist() == [0.0, 0.0]
    np.testing.assert_allclose(mean.data, 0.1 * x.data.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(var.data, 0.9 + 0.1 * x.data.var(axis=0, ddof=1), rtol=1e-5)
    assert y.dtype == mean.dtype == var.dtype == np.float32
    np.testing.assert_allclose(y.data.mean(axis=0), 0.0, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_batch_norm_updates_array_running_stats_in_place_as_the_book(dtype):
    # The book's own tests hand batch_nrom plain arrays in training.
    x = rng().randn(6, 2).astype(dtype)
    gamma, beta = np.ones(2, dtype), np.zeros(2, dtype)
    mean, var = np.zeros(2, dtype), np.ones(2, dtype)
    mean_v, var_v = Variable(np.zeros(2, dtype)), Variable(np.ones(2, dtype))
    y = F.batch_nrom(x, gamma, beta, mean, var)
    y_v = F.batch_norm(x, gamma, beta, mean_v, var_v)
    np.testing.assert_array_equal(y.data, y_v.data)
    np.testing.assert_array_equal(mean, mean_v.data)
    np.testing.assert_array_equal(var, var_v.data)
    np.testing.assert_allclose(mean, 0.1 * x.mean(axis=0), rtol=1e-5)
    assert mean.dtype == var.dtype == dtype
    with pytest.raises(ValueError, match=r"gamma must have shape \(2,\)"):
        F.batch_norm(x, np.ones(3), beta, mean, var)
    with dezero.test_mode():
        F.batch_norm(x, gamma, beta, mean, var)
    assert F.batch_nrom is F.batch_norm


def test_batch_norm_array_running_stats_raise_under_trace():
    from dezero.static import TraceError
    x = rng().randn(6, 2)
    mean, var = np.zeros(2), Variable(np.ones(2))
    step = dezero.trace(lambda x: F.batch_norm(x, np.ones(2), np.zeros(2), mean, var))
    with pytest.raises(TraceError, match=r"running mean is a ndarray in a traced run.*"
                                         r"\n  fix: .*mean = Variable\(array\)"):
        step(Variable(x))
    np.testing.assert_array_equal(mean, 0.0)  # nothing written
    mean = Variable(np.zeros(2))  # as Variables, the same step traces and replays
    for _ in range(3):
        eager_mean = mean.data.copy() * 0.9 + 0.1 * x.mean(axis=0)
        step(Variable(x))
        np.testing.assert_allclose(mean.data, eager_mean, rtol=1e-12)


ONE_VALUE = r"batch_norm: x of shape \(1, 10\) has one value per channel in training.*" \
            r"no spread.*the output is beta and the running variance shrinks toward 0"


def test_batch_norm_of_a_batch_of_one_gives_beta_as_the_book_s_test_expects():
    # The book's TestBatchNorm.test_forward2 (N=1, C=10) against Chainer: a batch of one
    # has variance 0, so x_hat = 0 / sqrt(0 + eps) = 0 and y = beta. dezero raised.
    r = rng()
    x, gamma, beta, mean = (r.randn(*shape).astype(np.float32) for shape in
                            ((1, 10), (10,), (10,), (10,)))
    var = np.abs(r.randn(10)).astype(np.float32)
    mean0, var0 = mean.copy(), var.copy()
    xv, gv, bv = Variable(x), Variable(gamma), Variable(beta)
    with pytest.warns(RuntimeWarning, match=ONE_VALUE):
        y = F.batch_nrom(xv, gv, bv, mean, var)
    np.testing.assert_array_equal(y.data, beta[None])
    # Chainer's running variance folds the batch's 0 in with the factor m / max(m - 1, 1).
    np.testing.assert_allclose(var, np.float32(0.9) * var0, rtol=1e-6)
    np.testing.assert_allclose(mean, 0.9 * mean0 + 0.1 * x[0], rtol=1e-5, atol=1e-6)
    F.sum(y * r.randn(1, 10)).backward()
    assert not xv.grad.data.any() and not gv.grad.data.any()  # y does not depend on them
    assert all(np.isfinite(a).all() for a in (var, mean, bv.grad.data))


def test_batch_norm_of_a_batch_of_one_warns_once_per_line_or_raises_as_an_error():
    x, gamma, beta = np.ones((1, 10)), np.ones(10), np.zeros(10)
    mean, var = Variable(np.zeros(10)), Variable(np.ones(10))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # Python's filter for RuntimeWarning
        for _ in range(3):
            F.batch_norm(x, gamma, beta, mean, var)
        F.batch_norm(x, gamma, beta, mean, var)  # another line warns again
    assert [(w.category, w.filename) for w in caught] == [(RuntimeWarning, __file__)] * 2
    assert caught[0].lineno != caught[1].lineno
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the refusal, for who wants it
        with pytest.raises(RuntimeWarning, match=ONE_VALUE):
            F.batch_norm(x, gamma, beta, mean, var)


@pytest.mark.filterwarnings("ignore:batch_norm. x of shape:RuntimeWarning")
def test_a_traced_step_of_batch_norm_on_a_batch_of_one_equals_eager():
    from dezero import layers as L
    from dezero import models, optimizers

    class Net(models.Model):
        def __init__(self):
            super().__init__()
            self.l1, self.bn = L.Linear(10, in_size=4), L.BatchNorm()

        def forward(self, x):
            return self.bn(self.l1(x))

    def step_of(model):
        optimizer = optimizers.SGD(0.1).setup(model)

        def step(x, w):
            loss = F.sum(model(x) * w)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss
        return step

    nets = []
    for _ in range(2):
        np.random.seed(0)
        nets.append(Net())
    eager, traced = step_of(nets[0]), dezero.trace(check=True)(step_of(nets[1]))
    r = rng()
    for _ in range(3):
        x, w = r.randn(1, 4).astype(np.float32), r.randn(1, 10).astype(np.float32)
        np.testing.assert_array_equal(traced(x, w).data, eager(x, w).data)
        for a, b in zip(nets[0].params(), nets[1].params()):
            np.testing.assert_allclose(a.data, b.data, rtol=1e-6)
        for name in ("avg_mean", "avg_var"):
            a, b = getattr(nets[0].bn, name).data, getattr(nets[1].bn, name).data
            np.testing.assert_allclose(a, b, rtol=1e-6)
            assert np.isfinite(a).all()
    assert traced.entries == 1  # recorded once, replayed twice


def test_embed_id_matches_torch_with_repeated_ids(torch):
    W = rng().randn(5, 3)
    ids = np.array([[0, 4, 4], [1, 4, 0]])
    w = rng(1).randn(2, 3, 3)
    Wv = Variable(W.copy())
    y = F.embed_id(ids, Wv)
    F.sum(y * w).backward()
    Wt = torch.tensor(W, requires_grad=True)
    yt = torch.nn.functional.embedding(torch.tensor(ids), Wt)
    (yt * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    np.testing.assert_allclose(Wv.grad.data, Wt.grad.numpy(), rtol=1e-12)


# =============================================================================
# Inputs that once gave a silent wrong result or a bare error
# =============================================================================


@pytest.mark.parametrize("name", ["sigmoid_cross_entropy", "binary_cross_entropy"])
def test_cross_entropies_refuse_targets_of_another_shape_of_the_same_size(name):
    x = np.full((2, 3), 0.5)
    with pytest.raises(ValueError, match=rf"{name}: x has shape \(2, 3\) but t has "
                                         r"shape \(3, 2, 1\)"):
        getattr(F, name)(x, np.zeros((3, 2, 1), int))
    # Shapes that differ only by axes of length 1 pair the same elements.
    t = rng().randint(0, 2, (2, 3))
    assert getattr(F, name)(x, t[:, None, :]).data == getattr(F, name)(x, t).data


LOSSES = ["mean_squared_error", "mean_squared_error_simple", "softmax_cross_entropy",
          "softmax_cross_entropy_simple", "sigmoid_cross_entropy", "binary_cross_entropy",
          "accuracy"]


@pytest.mark.parametrize("target, given", [
    (None, "None"), (Variable(None), "a Variable holding None"),
    ("ab", r"(a str \('ab'\)|an array of dtype <U2)"),
    ({"a": 1}, r"(a dict \(\{'a': 1\}\)|an array of dtype object)"),
    (np.array(["a", "b"]), "an array of dtype <U1")], ids=str)
@pytest.mark.parametrize("name", LOSSES)
def test_losses_name_a_target_that_holds_no_numbers(name, target, given):
    # None failed further in: AttributeError 'NoneType' object has no attribute 'dtype'.
    with pytest.raises(TypeError, match=rf"^{name}: (t|x1) is {given}; it takes a Variable or "
                                        r"an array of numbers, e.g. np.asarray"):
        getattr(F, name)(np.full((2, 3), 0.5), target)


@pytest.mark.parametrize("name", LOSSES)
def test_losses_name_an_input_that_is_none_or_a_list(name):
    with pytest.raises(TypeError, match=rf"^{name}: (x|x0|p|y) is None; it takes a Variable"):
        getattr(F, name)(None, np.zeros(2, int))
    if "mean_squared" not in name:  # mean_squared_error takes a list target as numpy would
        with pytest.raises(TypeError, match=rf"^{name}: t is a list \(\[0, 1\]\); it takes"):
            getattr(F, name)(np.full((2, 1), 0.5), [0, 1])


def test_torch_refuses_targets_of_another_shape_too(torch):
    with pytest.raises(ValueError):
        torch.nn.functional.binary_cross_entropy(torch.full((2, 3), 0.5), torch.zeros(3, 2, 1))


@pytest.mark.parametrize("p", [[1.5, 0.5], [-0.2, 0.5], [np.nan, 0.5]], ids=str)
def test_binary_cross_entropy_refuses_values_that_are_no_probabilities(p):
    with pytest.raises(ValueError, match=r"p of binary_cross_entropy must hold values "
                                         r"in \[0, 1\].*sigmoid_cross_entropy"):
        F.binary_cross_entropy(np.array(p), np.array([1, 0]))


def test_a_replayed_binary_cross_entropy_checks_the_values_of_every_call():
    # A check at recording alone would let later calls give a negative loss.
    traced = dezero.trace(lambda p, t: F.binary_cross_entropy(p, t))
    t = np.array([1, 0])
    for p in ([0.5, 0.25], [0.9, 0.1]):
        np.testing.assert_allclose(traced(np.array(p), t).data,
                                   F.binary_cross_entropy(np.array(p), t).data, rtol=1e-12)
    with pytest.raises(ValueError, match=r"p of binary_cross_entropy must hold values"):
        traced(np.array([1.5, 0.1]), t)
    assert traced.entries == 1


def test_torch_refuses_probabilities_outside_0_1_too(torch):
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        torch.nn.functional.binary_cross_entropy(torch.tensor([1.5]), torch.tensor([1.0]))


@pytest.mark.parametrize("ids", [[True, False, True], [0.0, 1.0]], ids=str)
def test_embed_id_refuses_ids_that_are_not_integers(ids):
    # numpy would read bool ids as a mask: 2 rows for 3 ids.
    W = Variable(rng().randn(4, 2))
    with pytest.raises(TypeError, match=r"embed_id: ids must be integers, got dtype"):
        F.embed_id(np.array(ids), W)
    with pytest.raises(TypeError, match="embed_id: ids must be integers"):
        dezero.layers.EmbedID(4, 2)(np.array(ids))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_of_a_0d_input_is_a_0d_output_of_its_dtype(dtype):
    np.random.seed(0)
    x = Variable(np.array(2.0, dtype))
    ys = [F.dropout(x, 0.5) for _ in range(20)]
    assert all(y.shape == () and y.dtype == dtype for y in ys)
    assert {float(y.data) for y in ys} == {0.0, 4.0}
    ys[0].backward()
    assert x.grad.shape == () and x.grad.dtype == dtype


def test_torch_refuses_bool_ids_to_an_embedding_too(torch):
    with pytest.raises(RuntimeError):
        torch.nn.functional.embedding(torch.tensor([True, False, True]), torch.zeros(4, 2))


def test_torch_flattens_an_empty_batch_and_drops_out_a_0d_input_too(torch):
    assert tuple(torch.flatten(torch.zeros(0, 3, 4), start_dim=1).shape) == \
        F.flatten(np.zeros((0, 3, 4))).shape
    assert torch.nn.functional.dropout(torch.tensor(2.0), 0.5).shape == ()
