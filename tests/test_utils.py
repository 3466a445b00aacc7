"""dezero.utils: numerical gradients, gradient_check, shape helpers and sizes,
clip_grad_norm."""
import doctest

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Function, Variable, utils


def test_numerical_grad_of_a_known_function():
    x = np.array([[0.5, -1.0], [2.0, 0.0]])
    grad = utils.numerical_grad(lambda v: v ** 3, Variable(x))
    np.testing.assert_allclose(grad, 3 * x ** 2, rtol=1e-6, atol=1e-7)
    assert grad.shape == x.shape


def test_numerical_grad_on_plain_arrays_with_extra_args():
    x = np.array([1.0, 2.0])
    grad = utils.numerical_grad(lambda v, c: v * c, x, 3.0)
    np.testing.assert_allclose(grad, [3.0, 3.0])


def test_numerical_grad_leaves_the_input_unchanged():
    x = np.array([1.0, 2.0])
    utils.numerical_grad(np.sin, x)
    np.testing.assert_array_equal(x, [1.0, 2.0])


class WrongSquare(Function):
    def forward(self, x):
        return x * x

    def backward(self, gy):
        x, = self.inputs
        return gy * x  # should be 2 * x * gy


def test_gradient_check_accepts_a_right_backward():
    assert utils.gradient_check(F.tanh, np.linspace(-1, 1, 4))


def test_gradient_check_rejects_a_wrong_backward_and_names_the_worst_element(capsys):
    x = np.array([[0.1, 0.2], [0.3, 3.0]])
    assert utils.gradient_check(lambda v: WrongSquare()(v), x) is False
    out = capsys.readouterr().out
    assert "worst element at (1, 1)" in out
    assert "backprop 3," in out and "numerical 6 " in out


def test_gradient_check_works_from_float32_input():
    x = np.array([0.3, 0.7], dtype=np.float32)
    assert utils.gradient_check(F.sin, x)


@pytest.mark.parametrize("shape, target, expected", [
    ((2, 3), (3,), [5, 7, 9]),
    ((2, 3), (1, 3), [[5, 7, 9]]),
    ((2, 3), (2, 1), [[6], [15]]),
    ((2, 3), (), 21),
    ((2, 3), (2, 3), [[1, 2, 3], [4, 5, 6]]),
])
def test_sum_to(shape, target, expected):
    x = np.arange(1, 7).reshape(shape)
    y = utils.sum_to(x, target)
    assert y.shape == target
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("x_shape, axis, keepdims, gy_shape, expected", [
    ((2, 3, 4), 1, False, (2, 4), (2, 1, 4)),
    ((2, 3, 4), (0, 2), False, (3,), (1, 3, 1)),
    ((2, 3, 4), -1, False, (2, 3), (2, 3, 1)),
    ((2, 3, 4), 1, True, (2, 1, 4), (2, 1, 4)),
    ((2, 3, 4), None, False, (), ()),
])
def test_reshape_sum_backward(x_shape, axis, keepdims, gy_shape, expected):
    gy = Variable(np.ones(gy_shape))
    assert utils.reshape_sum_backward(gy, x_shape, axis, keepdims).shape == expected


def test_logsumexp_is_stable_for_large_values():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0]])
    y = utils.logsumexp(x, axis=1)
    np.testing.assert_allclose(y, [[1000 + np.log(2)], [-1000 + np.log(2)]])
    small = np.array([[0.5, 1.5, -2.0]])
    np.testing.assert_allclose(utils.logsumexp(small), np.log(np.exp(small).sum(1, keepdims=True)))


@pytest.mark.parametrize("axis, expected", [(None, (1, 1, 1)), (1, (2, 1, 4)),
                                            ((0, 2), (1, 3, 1)), (-1, (2, 3, 1))])
def test_max_backward_shape(axis, expected):
    assert utils.max_backward_shape(np.zeros((2, 3, 4)), axis) == expected


def test_conv_sizes_and_pair():
    assert utils.get_conv_outsize(4, 3, 1, 1) == 4
    assert utils.get_conv_outsize(28, 5, 2, 0) == 12
    assert utils.get_deconv_outsize(4, 3, 1, 1) == 4
    assert utils.get_deconv_outsize(12, 4, 2, 1) == 24
    # deconv undoes conv's size when stride divides evenly
    assert utils.get_conv_outsize(utils.get_deconv_outsize(7, 4, 2, 1), 4, 2, 1) == 7
    assert utils.pair(3) == (3, 3) and utils.pair((2, 5)) == (2, 5)
    assert utils.pair(np.int64(2)) == (2, 2)
    with pytest.raises(ValueError, match="pair"):
        utils.pair((1, 2, 3))


def test_array_equal_and_allclose_accept_variables():
    a = Variable(np.array([1.0, 2.0]))
    assert utils.array_equal(a, np.array([1.0, 2.0]))
    assert utils.array_allclose(a, np.array([1.0, 2.0 + 1e-7]))
    assert not utils.array_allclose(a, np.array([1.0, 2.1]))


# =============================================================================
# clip_grad_norm: PyTorch's clip_grad_norm_, eager and traced
# =============================================================================
def _grads_model(dtype, scale=1.0, seed=0):
    from dezero.models import MLP
    rng = np.random.default_rng(seed)
    model = MLP((4, 3))
    model(np.zeros((1, 5), dtype))
    for p in model.params():
        p.data = p.data.astype(dtype)
        p.grad = Variable((rng.standard_normal(p.shape) * scale).astype(dtype))
    return model


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])  # clips, passes unchanged
def test_clip_grad_norm_agrees_with_torch(torch, dtype, max_norm):
    model = _grads_model(dtype)
    tensors = [torch.tensor(p.data.copy(), requires_grad=True) for p in model.params()]
    for t, p in zip(tensors, model.params()):
        t.grad = torch.tensor(p.grad.data.copy())
    want = torch.nn.utils.clip_grad_norm_(tensors, max_norm)
    norm = utils.clip_grad_norm(model.params(), max_norm)
    rtol = 4 * float(np.finfo(dtype).eps)  # a sum of a few dozen squares, one sqrt
    np.testing.assert_allclose(float(norm.data), float(want), rtol=rtol)
    for t, p in zip(tensors, model.params()):
        assert p.grad.dtype == dtype
        np.testing.assert_allclose(p.grad.data, t.grad.numpy(), rtol=rtol, atol=0)
    total = np.sqrt(sum(float((p.grad.data.astype(np.float64) ** 2).sum())
                        for p in model.params()))
    assert total == pytest.approx(min(float(want), max_norm), rel=1e-5)


def test_clip_grad_norm_takes_a_layer_or_a_parameter_and_skips_missing_gradients():
    model = _grads_model(np.float64)
    model.l1.b.grad = None
    grads = {id(p): p.grad.data.copy() for p in model.params() if p.grad is not None}
    want = np.sqrt(sum((g ** 2).sum() for g in grads.values()))
    assert float(utils.clip_grad_norm(model, 1.0).data) == pytest.approx(want, rel=1e-12)
    assert model.l1.b.grad is None
    for p in model.params():
        if p.grad is not None:
            np.testing.assert_allclose(p.grad.data, grads[id(p)] / (want + 1e-6), rtol=1e-12)
    w = model.l0.W
    w.grad = Variable(np.full(w.shape, 2.0))
    utils.clip_grad_norm(w, 2.0)
    np.testing.assert_allclose(np.sqrt((w.grad.data ** 2).sum()), 2.0, rtol=1e-6)
    assert float(utils.clip_grad_norm([], 1.0).data) == 0.0
    with pytest.raises(ValueError, match=r"clip_grad_norm: max_norm must be a finite "
                                         r"number >= 0, got -1"):
        utils.clip_grad_norm(model, -1)


def test_clip_grad_norm_clips_a_variable_and_names_what_it_cannot_clip():
    v = Variable(np.ones(2))  # not a Parameter: it was iterated, and left unclipped
    v.grad = Variable(np.array([3.0, 4.0]))
    assert float(utils.clip_grad_norm(v, 1.0).data) == 5.0
    np.testing.assert_allclose(v.grad.data, [0.6, 0.8], rtol=1e-5)
    with pytest.raises(TypeError, match=r"clip_grad_norm: params must be Parameters "
                       r"\(model.params\(\), a Layer or one Parameter\), got a ndarray"):
        utils.clip_grad_norm([np.ones(2)], 1.0)
    w = dezero.Parameter(np.zeros(2, np.int64), name="w")
    w.grad = Variable(np.array([3, 4]))  # scaled by int64(0.2), it became [0, 0]
    with pytest.raises(TypeError, match=r"the gradient of w is of dtype int64; only float"):
        utils.clip_grad_norm([w], 1.0)
    np.testing.assert_array_equal(w.grad.data, [3, 4])


def test_clip_grad_norm_of_float16_gradients_does_not_overflow():
    model = _grads_model(np.float16, scale=300.0)  # squares past float16's 65504
    want = np.sqrt(sum((p.grad.data.astype(np.float64) ** 2).sum() for p in model.params()))
    norm = utils.clip_grad_norm(model, 1.0)
    assert float(norm.data) == pytest.approx(want, rel=1e-3)
    for p in model.params():
        assert p.grad.dtype == np.float16 and np.isfinite(p.grad.data).all()


def test_clip_grad_norm_in_a_traced_step_computes_the_norm_afresh():
    # The batches' norms lie on both sides of max_norm: a replay that kept the
    # recorded scale, or the recorded branch, would part from eager.
    import dezero
    from dezero import optimizers
    from dezero.models import MLP

    rng = np.random.default_rng(4)
    batches = [(rng.standard_normal((8, 4)).astype(np.float32) * s, rng.integers(0, 3, 8))
               for s in (0.1, 5.0, 0.1, 5.0, 1.0)]
    runs = []
    for traced in (False, True):
        np.random.seed(0)
        model = MLP((6, 3))
        opt = optimizers.SGD(lr=0.1).setup(model)

        def step(x, t, model=model, opt=opt):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            norm = utils.clip_grad_norm(model.params(), 0.3)
            opt.update()
            return norm

        step = dezero.trace(step) if traced else step
        norms = [float(step(x, t).data) for x, t in batches]
        runs.append((norms, [p.data.copy() for p in model.params()]))
        if traced:
            assert step.entries == 1
    (eager_norms, eager_params), (traced_norms, traced_params) = runs
    assert min(eager_norms) < 0.3 < max(eager_norms)
    np.testing.assert_allclose(traced_norms, eager_norms, rtol=1e-5)
    for a, b in zip(traced_params, eager_params):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_doc_example_runs():
    finder, runner = doctest.DocTestFinder(), doctest.DocTestRunner()
    globs = {"np": np, "dezero": dezero}
    for test in finder.find(utils.clip_grad_norm, "clip_grad_norm", globs=globs):
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    assert runner.summarize(verbose=False).attempted >= 1
