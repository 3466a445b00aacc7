"""Convolution and pooling: dezero.functions_conv (also reachable as F.conv2d ...).

Gradients are checked numerically in float64, including the gradient of the
gradient through the conv weights; values are compared against PyTorch where it
is installed.
"""
import doctest

import numpy as np
import pytest
from grad_helpers import gradient_of, rng
from grad_helpers import weights as fixed_weights

import dezero
import dezero.functions as F
import dezero.functions_conv as C
import dezero.layers as L
from dezero import Variable
from dezero.utils import gradient_check


def c(a, x):
    """A constant operand in x's dtype, so that float32 cases stay float32."""
    return np.asarray(a).astype(x.dtype)


# Shapes chosen small for the numerical gradients: x (2, 2, 5, 4), W (3, 2, 3, 2).
X = rng(1).randn(2, 2, 5, 4)
W = rng(2).randn(3, 2, 3, 2)
B = rng(3).randn(3)
XD = rng(4).randn(2, 3, 3, 2)   # deconv input: 3 channels
WD = rng(5).randn(3, 2, 3, 2)   # deconv weight (C, OC, KH, KW)
CONF = dict(stride=(2, 1), pad=(1, 0))


def weights(shape, x, seed=9):
    return c(fixed_weights(seed, shape), x)


def conv_out(x):
    return F.conv2d(x, c(W, x), c(B, x), **CONF)


# name -> (function of one differentiable input, input); each output is weighted so
# that the checks see more than the sum.
CASES = {
    "conv2d_x": (lambda x: conv_out(x) * weights((2, 3, 3, 3), x), X),
    "conv2d_W": (lambda w: F.conv2d(c(X, w), w, c(B, w), **CONF) * weights((2, 3, 3, 3), w),
                 W),
    "conv2d_b": (lambda b: F.conv2d(c(X, b), c(W, b), b, **CONF) * weights((2, 3, 3, 3), b),
                 B),
    "conv2d_nobias_pad": (lambda x: F.conv2d(x, c(W, x), pad=1) * weights((2, 3, 5, 5), x), X),
    "deconv2d_x": (lambda x: F.deconv2d(x, c(WD, x), c(B[:2], x), **CONF)
                   * weights((2, 2, 5, 3), x), XD),
    "deconv2d_W": (lambda w: F.deconv2d(c(XD, w), w, stride=2, pad=1, outsize=(6, 3))
                   * weights((2, 2, 6, 3), w), WD),
    "deconv2d_b": (lambda b: F.deconv2d(c(XD, b), c(WD, b), b) * weights((2, 2, 5, 3), b),
                   B[:2]),
    "pooling": (lambda x: F.pooling(x, 2, stride=2, pad=1) * weights((2, 2, 3, 3), x), X),
    "pooling_overlap": (lambda x: F.pooling(x, (3, 2), stride=1) * weights((2, 2, 3, 3), x), X),
    "average_pooling": (lambda x: F.average_pooling(x, 2, stride=(2, 1), pad=1)
                        * weights((2, 2, 3, 5), x), X),
    "im2col": (lambda x: F.im2col(x, (3, 2), **CONF) * weights((18, 12), x), X),
    "im2col_tensor": (lambda x: F.im2col(x, 2, to_matrix=False)
                      * weights((2, 2, 2, 2, 4, 3), x), X),
    "col2im": (lambda col: F.col2im(col, (2, 2, 5, 4), (3, 2), **CONF)
               * weights((2, 2, 5, 4), col), rng(6).randn(18, 12)),
    "col2im_tensor": (lambda col: F.col2im(col, (2, 2, 5, 4), 2, to_matrix=False)
                      * weights((2, 2, 5, 4), col), rng(6).randn(2, 2, 2, 2, 4, 3)),
    "conv2d_simple": (lambda x: F.conv2d_simple(x, c(W, x), c(B, x), **CONF)
                      * weights((2, 3, 3, 3), x), X),
    "pooling_simple": (lambda x: F.pooling_simple(x, 2, stride=2) * weights((2, 2, 2, 2), x),
                       X),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_numerical(name):
    f, x = CASES[name]
    assert gradient_check(f, x)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_stays_float32(name):
    f, x = CASES[name]
    x = Variable(x.astype(np.float32))
    y = f(x)
    assert y.dtype == np.float32
    F.sum(y).backward()
    assert x.grad.dtype == np.float32


# Squared outputs make every first derivative depend on the input again.
DOUBLE = {
    "conv2d_W": (lambda w: F.conv2d(X, w, B, **CONF) ** 2, W),
    "conv2d_x": (lambda x: F.conv2d(x, W, B, **CONF) ** 2, X),
    "deconv2d_W": (lambda w: F.deconv2d(XD, w, None, stride=2, pad=1, outsize=(6, 3)) ** 2, WD),
    "deconv2d_x": (lambda x: F.deconv2d(x, WD, B[:2], **CONF) ** 2, XD),
    "pooling": (lambda x: F.pooling(x, 2, stride=2, pad=1) ** 2, X),
    "average_pooling": (lambda x: F.average_pooling(x, 3, stride=2, pad=1) ** 2, X),
    "im2col": (lambda x: F.im2col(x, (3, 2), **CONF) ** 2, X),
    "col2im": (lambda col: F.col2im(col, (2, 2, 5, 4), (3, 2), **CONF) ** 2,
               rng(6).randn(18, 12)),
}


@pytest.mark.parametrize("name", sorted(DOUBLE))
def test_gradient_of_gradient_matches_numerical(name):
    f, x = DOUBLE[name]
    assert gradient_check(gradient_of(f), x, rtol=1e-3, atol=1e-4)


def test_double_backprop_reaches_weights_through_input_gradient():
    # A gradient penalty on the input, d/dW of sum((dL/dx)^2), needs conv2d's
    # backward (deconv2d) to be differentiable with respect to W.
    def penalty(w):
        x = Variable(X)
        loss = F.sum(F.tanh(F.conv2d(x, w, B, **CONF)))
        loss.backward(create_graph=True)
        w.cleargrad()  # keep only the penalty's gradient
        return F.sum(x.grad ** 2)
    assert gradient_check(penalty, W, rtol=1e-3, atol=1e-4)


def test_doc_examples_run():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    names = ["im2col", "col2im", "conv2d", "deconv2d", "pooling", "average_pooling"]
    for name in names:
        for test in finder.find(getattr(C, name), name, globs={"np": np, **vars(C)}):
            runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    assert runner.summarize(verbose=False).attempted == len(names)


# =============================================================================
# Against PyTorch
# =============================================================================


def torch_grads(f, *arrays):
    import torch  # called by tests that ask for the torch fixture
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = f(*ts)
    w = rng(42).randn(*y.shape)
    (y * torch.tensor(w)).sum().backward()
    return y.detach().numpy(), [t.grad.numpy() for t in ts], w


def dezero_grads(f, *arrays, w):
    vs = [Variable(a.copy()) for a in arrays]
    y = f(*vs)
    F.sum(y * w).backward()
    return y.data, [v.grad.data for v in vs]


def assert_same(f, g, *arrays):
    want, want_grads, w = torch_grads(g, *arrays)
    got, got_grads = dezero_grads(f, *arrays, w=w)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    for a, b in zip(got_grads, want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1), ((2, 1), (0, 2)), ((1, 3), (1, 1))])
def test_conv2d_matches_torch(stride, pad, torch):
    x, w, b = rng(1).randn(2, 3, 7, 6), rng(2).randn(4, 3, 3, 2), rng(3).randn(4)
    assert_same(lambda x, w, b: F.conv2d(x, w, b, stride=stride, pad=pad),
                lambda x, w, b: torch.nn.functional.conv2d(x, w, b, stride=stride,
                                                           padding=pad), x, w, b)


@pytest.mark.parametrize("stride,pad,outsize,extra", [
    (1, 0, None, (0, 0)), (2, 1, None, (0, 0)), ((2, 3), (1, 0), (8, 9), (1, 1))])
def test_deconv2d_matches_torch_conv_transpose(stride, pad, outsize, extra, torch):
    x, w, b = rng(1).randn(2, 3, 4, 3), rng(2).randn(3, 2, 3, 2), rng(3).randn(2)
    assert_same(lambda x, w, b: F.deconv2d(x, w, b, stride=stride, pad=pad, outsize=outsize),
                lambda x, w, b: torch.nn.functional.conv_transpose2d(
                    x, w, b, stride=stride, padding=pad, output_padding=extra), x, w, b)


@pytest.mark.parametrize("kernel,stride,pad", [(2, 2, 0), (3, 2, 1), ((3, 2), (1, 2), (1, 1))])
def test_pooling_matches_torch_max_pool_even_for_negative_inputs(kernel, stride, pad, torch):
    x = rng(1).randn(2, 3, 7, 6) - 5.0  # all negative: zero padding would win
    assert_same(lambda x: F.pooling(x, kernel, stride, pad),
                lambda x: torch.nn.functional.max_pool2d(x, kernel, stride, pad), x)


@pytest.mark.parametrize("kernel,stride,pad", [(2, 2, 0), (3, 2, 1), ((3, 2), (1, 2), (1, 1))])
def test_average_pooling_matches_torch_counting_padding(kernel, stride, pad, torch):
    x = rng(1).randn(2, 3, 7, 6)
    assert_same(lambda x: F.average_pooling(x, kernel, stride, pad),
                lambda x: torch.nn.functional.avg_pool2d(x, kernel, stride, pad,
                                                         count_include_pad=True), x)


def test_im2col_and_col2im_match_torch_unfold_and_fold(torch):
    x = rng(1).randn(2, 3, 6, 5)
    kernel, stride, pad = (3, 2), (2, 1), (1, 0)
    col = F.im2col(x, kernel, stride, pad).data
    unfolded = torch.nn.functional.unfold(torch.tensor(x), kernel, padding=pad, stride=stride)
    n, ckk, length = unfolded.shape
    np.testing.assert_array_equal(col.reshape(n, length, ckk).transpose(0, 2, 1),
                                  unfolded.numpy())
    back = F.col2im(col, x.shape, kernel, stride, pad).data
    folded = torch.nn.functional.fold(unfolded, x.shape[2:], kernel, padding=pad, stride=stride)
    np.testing.assert_allclose(back, folded.numpy(), rtol=1e-12)
    tensor = F.im2col(x, kernel, stride, pad, to_matrix=False).data
    assert tensor.shape == (2, 3, 3, 2, 3, 4)
    np.testing.assert_array_equal(tensor.transpose(0, 4, 5, 1, 2, 3).reshape(col.shape), col)
    np.testing.assert_allclose(F.col2im(tensor, x.shape, kernel, stride, pad,
                                        to_matrix=False).data, back, rtol=1e-12)


def test_simple_versions_agree():
    x = rng(1).randn(2, 2, 5, 4)
    np.testing.assert_allclose(F.conv2d_simple(x, W, B, **CONF).data,
                               F.conv2d(x, W, B, **CONF).data, rtol=1e-12)
    np.testing.assert_array_equal(F.pooling_simple(x, 2, 1).data, F.pooling(x, 2, 1).data)


def test_pooling_simple_agrees_with_pooling_and_torch_on_tied_maxima(torch):
    # Windows with several equal maxima: the first takes the whole gradient, in
    # pooling, pooling_simple and torch's max_pool2d alike.
    x = rng(1).randint(0, 3, (2, 2, 5, 4)).astype(np.float64)
    w = rng(2).randn(2, 2, 2, 2)
    grads = []
    for pool in (F.pooling, F.pooling_simple):
        xv = Variable(x.copy())
        y = pool(xv, 2, stride=2)
        F.sum(y * w).backward()
        np.testing.assert_array_equal(y.data, F.pooling(x, 2, stride=2).data)
        grads.append(xv.grad.data)
    xt = torch.tensor(x, requires_grad=True)
    (torch.nn.functional.max_pool2d(xt, 2, 2) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(grads[0], xt.grad.numpy())
    np.testing.assert_array_equal(grads[1], xt.grad.numpy())


# =============================================================================
# Errors and plumbing
# =============================================================================


def test_shape_errors_name_the_op_and_the_shapes():
    x = np.zeros((1, 2, 4, 4))
    with pytest.raises(ValueError, match=r"conv2d: .*2 channels.*\(3, 3, 2, 2\)"):
        F.conv2d(x, np.zeros((3, 3, 2, 2)))
    with pytest.raises(ValueError, match=r"b must have shape \(3,\)"):
        F.conv2d(x, np.zeros((3, 2, 2, 2)), np.zeros(2))
    with pytest.raises(ValueError, match="5x5 kernel does not fit a 4x4 image"):
        F.conv2d(x, np.zeros((3, 2, 5, 5)))
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        F.pooling(np.zeros((4, 4)), 2)
    with pytest.raises(ValueError, match=r"deconv2d: outsize \(11, 11\) does not fit"):
        F.deconv2d(x, np.zeros((2, 1, 2, 2)), stride=2, outsize=(11, 11))
    with pytest.raises(ValueError, match="col2im: columns of shape"):
        F.col2im(np.zeros((5, 8)), (1, 2, 4, 4), 2)


@pytest.mark.parametrize("kernel, pad", [(2, 2), (3, 2), ((3, 2), (1, 2)), (1, 1)], ids=str)
def test_pooling_refuses_padding_beyond_half_the_kernel(kernel, pad):
    # Such padding makes windows of padding alone, whose maximum was -inf.
    with pytest.raises(ValueError, match=r"pooling: pad .* more than half the kernel .*-inf"):
        F.pooling(rng(1).randn(1, 1, 4, 4), kernel, stride=1, pad=pad)


@pytest.mark.parametrize("kernel, pad", [(2, 2), (3, 2), ((3, 2), (1, 2)), (1, 1)], ids=str)
def test_torch_refuses_the_same_padding(kernel, pad, torch):
    with pytest.raises(RuntimeError, match="pad should be"):
        torch.nn.functional.max_pool2d(torch.zeros(1, 1, 4, 4), kernel, 1, pad)


STRIDE_ZERO = {
    "conv2d": lambda s: F.conv2d(np.zeros((1, 1, 4, 4)), np.ones((1, 1, 2, 2)), stride=s),
    "deconv2d": lambda s: F.deconv2d(np.zeros((1, 1, 4, 4)), np.ones((1, 1, 2, 2)), stride=s),
    "conv2d_simple": lambda s: F.conv2d_simple(np.zeros((1, 1, 4, 4)), np.ones((1, 1, 2, 2)),
                                               stride=s),
    "pooling": lambda s: F.pooling(np.zeros((1, 1, 4, 4)), 2, stride=s),
    "pooling_simple": lambda s: F.pooling_simple(np.zeros((1, 1, 4, 4)), 2, stride=s),
    "average_pooling": lambda s: F.average_pooling(np.zeros((1, 1, 4, 4)), 2, stride=s),
    "im2col": lambda s: F.im2col(np.zeros((1, 1, 4, 4)), 2, stride=s),
    "col2im": lambda s: F.col2im(np.zeros((9, 4)), (1, 1, 4, 4), 2, stride=s),
}


@pytest.mark.parametrize("op", sorted(STRIDE_ZERO))
@pytest.mark.parametrize("stride", [0, (1, 0), -1], ids=str)
def test_a_stride_below_one_names_the_op_and_the_fix(op, stride):
    # It was a ZeroDivisionError from the output size, naming nothing.
    with pytest.raises(ValueError, match=rf"^{op}: stride must be at least 1, got .*stride=1"):
        STRIDE_ZERO[op](stride)


def test_a_conv_layer_with_stride_zero_names_the_op():
    with pytest.raises(ValueError, match="^conv2d: stride must be at least 1"):
        L.Conv2d(1, 2, stride=0)(np.zeros((1, 1, 4, 4)))


EMPTY_BATCH = {
    "conv2d": (lambda x, w: F.conv2d(x, w, stride=2, pad=1), (2, 1, 3, 3),
               lambda torch, x, w: torch.nn.functional.conv2d(x, w, stride=2, padding=1)),
    "deconv2d": (lambda x, w: F.deconv2d(x, w, stride=2), (1, 2, 3, 3),
                 lambda torch, x, w: torch.nn.functional.conv_transpose2d(x, w, stride=2)),
    "conv2d_simple": (lambda x, w: F.conv2d_simple(x, w), (2, 1, 3, 3),
                      lambda torch, x, w: torch.nn.functional.conv2d(x, w)),
}


@pytest.mark.parametrize("op", sorted(EMPTY_BATCH))
def test_an_empty_batch_gives_an_empty_output_and_a_zero_weight_gradient(op):
    # As in PyTorch: N = 0 images convolve to N = 0 outputs; W's gradient is 0.
    f, w_shape, _ = EMPTY_BATCH[op]
    x, w = Variable(np.zeros((0, 1, 5, 5))), Variable(rng(1).randn(*w_shape))
    y = f(x, w)
    F.sum(y).backward(create_graph=True)
    assert y.shape[0] == 0 and x.grad.shape == x.shape
    assert w.grad.shape == w.shape and not w.grad.data.any()
    F.sum(w.grad).backward()  # double backprop runs too


@pytest.mark.parametrize("op", sorted(EMPTY_BATCH))
def test_the_output_shape_of_an_empty_batch_is_torchs(op, torch):
    f, w_shape, torch_f = EMPTY_BATCH[op]
    w = rng(1).randn(*w_shape)
    want = torch_f(torch, torch.zeros(0, 1, 5, 5, dtype=torch.float64), torch.tensor(w))
    assert f(np.zeros((0, 1, 5, 5)), w).shape == tuple(want.shape)


@pytest.mark.parametrize("op", ["pooling", "pooling_simple", "average_pooling"])
def test_pooling_an_empty_batch_gives_an_empty_output(op):
    x = Variable(np.zeros((0, 2, 4, 4)))
    y = getattr(F, op)(x, 2, stride=2)
    F.sum(y).backward()
    assert y.shape == (0, 2, 2, 2) and x.grad.shape == x.shape


def test_ops_keep_their_attrs_and_backward_needs_nothing_from_forward():
    x = Variable(rng(1).randn(1, 1, 4, 4))
    y = F.pooling(x, 2, stride=2)
    f = y.creator
    assert f.attrs == {"kernel_size": (2, 2), "pad": (0, 0), "stride": (2, 2)}
    assert type(f)(**f.attrs).forward(x.data).tolist() == y.data.tolist()
    conv = F.conv2d(x, np.ones((1, 1, 2, 2)), stride=2).creator
    assert conv.op_name == "conv2d" and conv.attrs == {"pad": (0, 0), "stride": (2, 2)}
    assert {"conv2d", "deconv2d", "conv2d_grad_w", "pooling", "pooling_grad",
            "pooling_with_indexes", "average_pooling", "im2col", "col2im"} <= set(dezero.core.OPS)


def test_small_cnn_step_on_digit_sized_images_is_fast():
    import time
    r = rng(0)
    x = Variable(r.randn(100, 1, 8, 8).astype(np.float32))
    W1 = Variable((r.randn(16, 1, 3, 3) * 0.3).astype(np.float32))
    W2 = Variable((r.randn(32, 16, 3, 3) * 0.1).astype(np.float32))
    start = time.perf_counter()
    for _ in range(3):
        h = F.relu(F.conv2d(x, W1, pad=1))
        h = F.pooling(F.relu(F.conv2d(h, W2, pad=1)), 2, 2)
        loss = F.softmax_cross_entropy(F.reshape(h, (100, -1))[:, :10], np.arange(100) % 10)
        W1.cleargrad()
        W2.cleargrad()
        loss.backward()
    assert W1.grad.dtype == np.float32 and W2.grad.shape == W2.shape
    assert time.perf_counter() - start < 3.0  # about 0.03 s a step on one core


@pytest.mark.parametrize("op", sorted(STRIDE_ZERO))
@pytest.mark.parametrize("stride", [1.0, (1, 1.5), "1", (1, 1, 1), True], ids=str)
def test_a_stride_that_is_no_int_or_pair_of_ints_names_the_op(op, stride):
    with pytest.raises(TypeError, match=rf"^{op}: stride must be an int or a pair of ints, "
                                        r"got"):
        STRIDE_ZERO[op](stride)


@pytest.mark.parametrize("op", sorted(STRIDE_ZERO))
def test_a_stride_given_as_a_list_is_read_as_a_pair_as_torch_does(op):
    np.testing.assert_array_equal(STRIDE_ZERO[op]([1, 1]).data, STRIDE_ZERO[op]((1, 1)).data)


@pytest.mark.parametrize("pad, error, message", [
    (1.0, TypeError, r"pad must be an int or a pair of ints, got 1\.0"),
    ([1, 0.5], TypeError, r"pad must be an int or a pair of ints"),
    (-1, ValueError, r"pad must be at least 0, got \(-1, -1\)")], ids=str)
@pytest.mark.parametrize("op", ["conv2d", "deconv2d", "conv2d_simple", "im2col", "col2im",
                                "pooling", "pooling_simple", "average_pooling"])
def test_a_bad_pad_names_the_op(op, pad, error, message):
    calls = {
        "conv2d": lambda: F.conv2d(np.zeros((1, 1, 4, 4)), np.ones((1, 1, 3, 3)), pad=pad),
        "deconv2d": lambda: F.deconv2d(np.zeros((1, 1, 4, 4)), np.ones((1, 1, 3, 3)), pad=pad),
        "conv2d_simple": lambda: F.conv2d_simple(np.zeros((1, 1, 4, 4)), np.ones((1, 1, 3, 3)),
                                                 pad=pad),
        "im2col": lambda: F.im2col(np.zeros((1, 1, 4, 4)), 3, pad=pad),
        "col2im": lambda: F.col2im(np.zeros((4, 9)), (1, 1, 4, 4), 3, pad=pad),
        "pooling": lambda: F.pooling(np.zeros((1, 1, 4, 4)), 3, pad=pad),
        "pooling_simple": lambda: F.pooling_simple(np.zeros((1, 1, 4, 4)), 3, pad=pad),
        "average_pooling": lambda: F.average_pooling(np.zeros((1, 1, 4, 4)), 3, pad=pad)}
    with pytest.raises(error, match=rf"^{op}: {message}"):
        calls[op]()


@pytest.mark.parametrize("op", ["pooling", "pooling_simple", "average_pooling", "im2col"])
@pytest.mark.parametrize("kernel", [0, (2, 0), 2.0], ids=str)
def test_a_kernel_of_no_pixels_or_no_int_names_the_op(op, kernel):
    # average_pooling of a 0x0 window was NaN everywhere (the mean of nothing).
    error, message = (TypeError, "must be an int or a pair of ints") if kernel == 2.0 else \
        (ValueError, "must be at least 1")
    with pytest.raises(error, match=rf"^{op}: kernel_size {message}"):
        getattr(F, op)(np.ones((1, 1, 4, 4)), kernel)


def test_torch_refuses_a_kernel_of_zero_too(torch):
    with pytest.raises(RuntimeError):
        torch.nn.functional.avg_pool2d(torch.ones(1, 1, 4, 4), 0)


@pytest.mark.parametrize("cls", [L.Conv2d, L.Deconv2d])
def test_conv_layers_refuse_a_bad_kernel_size_when_made_and_take_a_list(cls):
    with pytest.raises(TypeError, match=rf"^{cls.__name__}: kernel_size must be an int or a "
                                        r"pair of ints, got 3\.0"):
        cls(2, 3.0)
    with pytest.raises(ValueError, match=rf"^{cls.__name__}: kernel_size must be at least 1"):
        cls(2, 0)
    assert cls(2, [3, 3])(np.ones((1, 1, 5, 5), np.float32)).shape[1] == 2


def test_torch_refuses_a_float_stride_and_takes_a_list_too(torch):
    x, w = torch.zeros(1, 1, 4, 4), torch.ones(1, 1, 2, 2)
    with pytest.raises(TypeError):
        torch.nn.functional.conv2d(x, w, stride=1.0)
    assert torch.nn.functional.conv2d(x, w, stride=[1, 1]).shape == (1, 1, 3, 3)
