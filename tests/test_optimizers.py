"""Optimizers against their update rules written out in numpy, step by step,
plus the hooks and the behaviours the book got wrong (FreezeParam)."""
import math
import warnings

import numpy as np
import pytest

import dezero.functions as F
import dezero.layers as L
import dezero.optimizers as O
from dezero import Parameter, Variable
from dezero.layers import Layer

STEPS = 4


class Pair(Layer):
    """Two parameters of different shapes and a gradient sequence for each."""

    def __init__(self, dtype=np.float32):
        super().__init__()
        rng = np.random.RandomState(0)
        self.w = Parameter(rng.randn(3, 2).astype(dtype))
        self.b = Parameter(rng.randn(2).astype(dtype))
        self.grads = [[rng.randn(*p.shape).astype(dtype) for p in self.params()]
                      for _ in range(STEPS)]


def run(opt, model, change=None):
    """Apply STEPS updates with the model's gradient sequence; `change(opt, step)`
    may set hyperparameters between steps. Returns the parameter values per step."""
    opt.setup(model)
    history = []
    for step in range(STEPS):
        if change is not None:
            change(opt, step)
        for p, g in zip(model.params(), model.grads[step]):
            p.grad = Variable(g.copy())
        opt.update()
        history.append([p.data.copy() for p in model.params()])
    return history


def reference(model, rule, state_init):
    """The same updates computed with numpy in float64 from the model's
    initial values: rule(param, grad, state, step) -> new param."""
    params = [p.data.astype(np.float64) for p in model.params()]
    states = [state_init(p) for p in params]
    history = []
    for step in range(STEPS):
        params = [rule(p, g.astype(np.float64), s, step)
                  for p, g, s in zip(params, model.grads[step], states)]
        history.append(params)
    return history


def assert_history(got, want, rtol=1e-5, atol=1e-6):
    for step, (g_step, w_step) in enumerate(zip(got, want)):
        for g, w in zip(g_step, w_step):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"step {step}")


def lr_schedule(opt, step):
    # Changing a hyperparameter between steps must take effect at the next update.
    if step == 2:
        opt.lr = 0.5


def test_sgd_matches_closed_form_and_lr_change_takes_effect():
    model = Pair()
    lrs = [0.1, 0.1, 0.5, 0.5]
    want = reference(model, lambda p, g, s, k: p - lrs[k] * g, lambda p: None)
    got = run(O.SGD(lr=0.1), model, lr_schedule)
    assert_history(got, want)


def test_momentum_sgd_matches_closed_form():
    model = Pair()
    lrs = [0.1, 0.1, 0.5, 0.5]

    def rule(p, g, s, k):
        s["v"] = 0.9 * s["v"] - lrs[k] * g
        return p + s["v"]

    want = reference(model, rule, lambda p: {"v": np.zeros_like(p)})
    got = run(O.MomentumSGD(lr=0.1), model, lr_schedule)
    assert_history(got, want)


def test_adagrad_matches_closed_form():
    model = Pair()

    def rule(p, g, s, k):
        s["h"] = s["h"] + g * g
        return p - 0.01 * g / (np.sqrt(s["h"]) + 1e-8)

    want = reference(model, rule, lambda p: {"h": np.zeros_like(p)})
    got = run(O.AdaGrad(lr=0.01), model)
    assert_history(got, want)


def test_adadelta_matches_closed_form():
    model = Pair()
    rho, eps = 0.95, 1e-6

    def rule(p, g, s, k):
        s["msg"] = rho * s["msg"] + (1 - rho) * g * g
        dx = np.sqrt((s["msdx"] + eps) / (s["msg"] + eps)) * g
        s["msdx"] = rho * s["msdx"] + (1 - rho) * dx * dx
        return p - dx

    want = reference(model, rule, lambda p: {"msg": np.zeros_like(p), "msdx": np.zeros_like(p)})
    got = run(O.AdaDelta(), model)
    assert_history(got, want)


def adam_rule(alphas, weight_decay=0.0, b1=0.9, b2=0.999, eps=1e-8,
              decays=lambda p: p.ndim >= 2):
    def rule(p, g, s, k):
        t = k + 1
        s["m"] = s["m"] + (1 - b1) * (g - s["m"])
        s["v"] = s["v"] + (1 - b2) * (g * g - s["v"])
        lr = alphas[k] * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        keep = 1 - alphas[k] * weight_decay if decays(p) else 1.0
        return p * keep - lr * s["m"] / (np.sqrt(s["v"]) + eps)
    return rule


def adam_state(p):
    return {"m": np.zeros_like(p), "v": np.zeros_like(p)}


def alpha_schedule(opt, step):
    if step == 2:
        opt.alpha = 0.05


def test_adam_matches_closed_form_with_bias_correction_at_every_step():
    model = Pair()
    want = reference(model, adam_rule([0.01, 0.01, 0.05, 0.05]), adam_state)
    opt = O.Adam(alpha=0.01)
    got = run(opt, model, alpha_schedule)
    assert_history(got, want)
    assert opt.t == STEPS
    # The book's lr property: the bias-corrected step size of the latest step.
    assert opt.lr == pytest.approx(0.05 * np.sqrt(1 - 0.999 ** STEPS) / (1 - 0.9 ** STEPS))


def test_adamw_matches_closed_form_with_decoupled_decay_of_matrices_only():
    model = Pair()  # w (3, 2) decays, b (2,) does not
    want = reference(model, adam_rule([0.01, 0.01, 0.05, 0.05], weight_decay=0.1), adam_state)
    got = run(O.AdamW(alpha=0.01, weight_decay=0.1), model, alpha_schedule)
    assert_history(got, want)


def test_adamw_decay_chooses_the_parameters_by_name_and_parameter():
    asked = []

    def decay(name, param):
        asked.append((name, param.shape))
        return name == "b"  # the vector only, where the default picks the matrix

    model = Pair()
    want = reference(model, adam_rule([0.01] * STEPS, weight_decay=0.1,
                                      decays=lambda p: p.ndim == 1), adam_state)
    assert_history(run(O.AdamW(alpha=0.01, weight_decay=0.1, decay=decay), model), want)
    assert asked[:2] == [("w", (3, 2)), ("b", (2,))]  # asked at every update
    assert len(asked) == 2 * STEPS
    model = Pair()
    want = reference(model, adam_rule([0.01] * STEPS, weight_decay=0.1,
                                      decays=lambda p: True), adam_state)
    assert_history(run(O.AdamW(0.01, weight_decay=0.1, decay=lambda n, p: True), model), want)
    with pytest.raises(TypeError, match=r"AdamW: decay must be a function of \(name, param\)"):
        O.AdamW(decay={"b"})


def test_adamw_names_parameters_by_their_path_and_shared_ones_once():
    from dezero.models import MLP
    model = MLP((3, 2))
    model(np.zeros((1, 4), np.float32))
    model.l1.W = model.l0.b  # shared: the name it has first
    asked = []
    opt = O.AdamW(decay=lambda name, p: asked.append(name) or True).setup(model)
    for p in model.params():
        p.grad = Variable(np.ones_like(p.data))
    opt.update()
    assert asked == ["l0/W", "l0/b", "l1/b"]
    # The choice is configuration, not state: state_dict keeps none of it.
    assert {key.partition("/")[0] for key in opt.state_dict()} == {
        "type", "hyperparameters", "counters", "ms", "vs", "joined"}


class Shapes(Layer):
    """A weight matrix, a bias, a convolution's kernel and a norm's gamma, with a
    gradient sequence of 20 steps."""

    def __init__(self, dtype, steps=20):
        super().__init__()
        rng = np.random.RandomState(3)
        self.W = Parameter(rng.randn(4, 3).astype(dtype))
        self.b = Parameter(rng.randn(3).astype(dtype))
        self.K = Parameter(rng.randn(2, 1, 3, 3).astype(dtype))
        self.gamma = Parameter(rng.randn(5).astype(dtype))
        self.grads = [[rng.randn(*p.shape).astype(dtype) for p in self.params()]
                      for _ in range(steps)]


def torch_adamw(torch, model, lrs, weight_decay, eps=1e-8):
    """torch.optim.AdamW on copies of model's parameters, matrices in a group that
    decays and the others in one that does not, fed model.grads; lrs[k] is the rate
    of step k (a schedule's). Returns the parameters after the last step."""
    tparams = [torch.tensor(p.data.copy(), requires_grad=True) for p in model.params()]
    groups = [{"params": [t for t in tparams if t.ndim >= 2], "weight_decay": weight_decay},
              {"params": [t for t in tparams if t.ndim < 2], "weight_decay": 0.0}]
    topt = torch.optim.AdamW(groups, lr=lrs[0], eps=eps)
    for k, grads in enumerate(model.grads):
        for group in topt.param_groups:
            group["lr"] = lrs[k]
        for t, g in zip(tparams, grads):
            t.grad = torch.tensor(g)
        topt.step()
    return [t.detach().numpy() for t in tparams]


def adamw_tolerance(dtype, lrs, eps=1e-8, b2=0.999):
    """How far dezero's AdamW and PyTorch's may part after len(lrs) steps: float32
    rounding of values of order 1 (a few ulps a step), and where eps goes. PyTorch
    divides by sqrt(v / (1 - b2^t)) + eps, dezero by (sqrt(v) + eps) / sqrt(1 - b2^t):
    eps / sqrt(1 - b2^t) where PyTorch has eps, a step of lr * m / sqrt(v_hat) changed
    by at most lr * eps / sqrt(1 - b2^t) / sqrt(v_hat); with gradients of order 1
    (v_hat of order 1), at most lr * eps / sqrt(1 - b2) per step."""
    spacing = float(np.finfo(dtype).eps) * 4 * len(lrs)
    placement = sum(lrs) * eps / np.sqrt(1 - b2) * 100  # v_hat down to 1e-4
    return spacing + placement


@pytest.mark.parametrize("eps", [1e-8, 0.0])  # 0: only rounding parts them
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adamw_agrees_with_torch_over_20_steps_decaying_matrices_only(torch, dtype, eps):
    model = Shapes(dtype)
    lrs = [0.01] * len(model.grads)
    got = run_all(O.AdamW(alpha=0.01, weight_decay=0.1, eps=eps), model)
    want = torch_adamw(torch, Shapes(dtype), lrs, weight_decay=0.1, eps=eps)
    tol = adamw_tolerance(dtype, lrs, eps)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    # The decay is seen: without it the matrices end elsewhere.
    plain = run_all(O.Adam(alpha=0.01, eps=eps), Shapes(dtype))
    assert np.abs(plain[0] - got[0]).max() > 100 * tol
    np.testing.assert_array_equal(plain[1], got[1])  # the bias: the same Adam steps


def test_adamw_follows_a_warmup_and_cosine_schedule_as_torch(torch):
    from dezero import schedules
    model = Shapes(np.float64)
    opt = O.AdamW(alpha=0.02, weight_decay=0.1)
    schedule = schedules.LinearWarmup(opt, 5, then=schedules.CosineDecay(opt, epochs=15))
    lrs = [schedule.rate(k) for k in range(len(model.grads))]
    assert lrs[0] == pytest.approx(0.004) and lrs[4] == pytest.approx(0.02)
    assert lrs[-1] < lrs[6] < lrs[5] == lrs[4]
    got = run_all(opt, model, between=lambda k: schedule.step() if k else None)
    assert opt.alpha == pytest.approx(lrs[-1])
    want = torch_adamw(torch, Shapes(np.float64), lrs, weight_decay=0.1)
    tol = adamw_tolerance(np.float64, lrs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def run_all(opt, model, between=None):
    """All of model's gradient steps; between(k) before step k. The last parameters."""
    opt.setup(model)
    for k, grads in enumerate(model.grads):
        if between is not None:
            between(k)
        for p, g in zip(model.params(), grads):
            p.grad = Variable(g.copy())
        opt.update()
    return [p.data.copy() for p in model.params()]


@pytest.mark.parametrize("make", [O.Adam, O.AdamW])
def test_adam_bias_correction_keeps_float32_precision(make):
    # 1 - beta2 ** t in float32 as 1 - exp(t log beta2) kept about four digits
    # (relative error up to 6e-5 at t = 1); -expm1(t log beta2) keeps them all.
    # The reference takes the hyperparameters as float32 holds them.
    alpha, beta1, beta2 = (float(np.float32(h)) for h in (0.001, 0.9, 0.999))
    optimizer = make(alpha=0.001).setup(Pair(np.float32))
    for t in range(1, 51):
        for p in optimizer.target.params():
            p.grad = Variable(np.ones_like(p.data))
        optimizer.update()
        want = alpha * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
        assert optimizer._lr_t.dtype == np.float32
        assert abs(float(optimizer._lr_t.data) - want) <= 1e-6 * want, t


def test_hyperparameters_read_as_floats_and_live_in_variables():
    opt = O.MomentumSGD(lr=0.1, momentum=0.5)
    assert opt.lr == 0.1 and isinstance(opt.lr, float)
    opt.lr = 0.25
    assert opt.lr == 0.25
    assert opt._lr.data.dtype == np.float32 and float(opt._lr.data) == 0.25
    with pytest.raises(AttributeError, match="alpha"):
        O.Adam().lr = 0.1


@pytest.mark.parametrize("make", [O.SGD, O.MomentumSGD, O.AdaGrad, O.AdaDelta, O.Adam, O.AdamW])
def test_float32_params_and_state_stay_float32(make):
    model = Pair(np.float32)
    opt = make()
    run(opt, model)
    for p in model.params():
        assert p.data.dtype == np.float32
    for slots in ("vs", "hs", "msg", "msdx", "ms"):
        for var in getattr(opt, slots, {}).values():
            assert isinstance(var, Variable) and var.data.dtype == np.float32


def test_float64_params_stay_float64():
    model = Pair(np.float64)
    run(O.Adam(), model)
    assert all(p.data.dtype == np.float64 for p in model.params())


def test_update_assigns_new_arrays_instead_of_writing_in_place():
    # A traced step sees only assignments; an in-place write would go unseen.
    model = Pair()
    before = [p.data for p in model.params()]
    snapshot = [a.copy() for a in before]
    run(O.MomentumSGD(), model)
    for old, copy in zip(before, snapshot):
        np.testing.assert_array_equal(old, copy)


def test_params_without_grad_are_skipped_and_update_needs_setup():
    model = Pair()
    w0 = model.w.data.copy()
    model.b.grad = Variable(np.ones(2, np.float32))
    O.SGD(lr=1.0).setup(model).update()
    np.testing.assert_array_equal(model.w.data, w0)
    with pytest.raises(RuntimeError, match="setup"):
        O.SGD().update()


# =============================================================================
# Hooks
# =============================================================================


def test_weight_decay_adds_rate_times_param_to_the_gradient():
    model = Pair()
    want = reference(model, lambda p, g, s, k: p - 0.1 * (g + 0.01 * p), lambda p: None)
    opt = O.SGD(lr=0.1)
    opt.add_hook(O.WeightDecay(0.01))
    assert_history(run(opt, model), want)


def test_add_hook_refuses_a_hook_s_class():
    # update() called the class on the parameters: WeightDecay said to set it up with
    # a model, and dezero.distributed.AllreduceGrads made a hook and ran nothing.
    for hook in (O.WeightDecay, O.ClipGrad, O.FreezeParam):
        with pytest.raises(TypeError, match=rf"add_hook: {hook.__name__} is a class.*"
                                            rf"optimizer.add_hook\({hook.__name__}\(...\)\)"):
            O.SGD().add_hook(hook)


@pytest.mark.parametrize("target, given", [
    (lambda p: [p], "a list of length 1"), (lambda p: (p, p), "a tuple of length 2"),
    (lambda p: iter([p]), "a list_iterator"), (lambda p: p, "a Parameter"),
    (lambda p: None, "None")], ids=["list", "tuple", "iterator", "parameter", "none"])
@pytest.mark.parametrize("make", [O.SGD, O.Adam])
def test_setup_refuses_what_is_not_a_layer_naming_it(make, target, given):
    # PyTorch's habit, setup([param]): update() failed on "'list' object has no
    # attribute 'params'", naming neither the optimizer nor what it takes.
    name = make.__name__
    with pytest.raises(TypeError, match=rf"^{name}\.setup: the target must be a Layer or a "
                                        rf"Model .*, got {given}; .*layer\.W = param.*"
                                        rf"optimizers\.{name}\(\)\.setup\(layer\)"):
        make().setup(target(Parameter(np.ones(2, np.float32))))


def test_parameters_of_one_s_own_train_on_a_layer_as_the_refusal_says():
    param = Parameter(np.ones(2, np.float32))
    layer = Layer()
    layer.W = param
    param.grad = Variable(np.full(2, 4.0, np.float32))
    O.SGD(lr=0.5).setup(layer).update()
    np.testing.assert_array_equal(param.data, [-1.0, -1.0])


def test_hook_rates_are_hyperparameters_too():
    model = Pair()
    rates = [0.01, 0.01, 0.5, 0.5]
    want = reference(model, lambda p, g, s, k: p - 0.1 * (g + rates[k] * p), lambda p: None)
    opt, decay = O.SGD(lr=0.1), O.WeightDecay(0.01)
    opt.add_hook(decay)

    def change(opt, step):
        if step == 2:
            decay.rate = 0.5

    assert_history(run(opt, model, change), want)
    assert decay.rate == 0.5 and float(decay._rate.data) == 0.5


def test_clip_grad_scales_by_the_global_norm_only_when_above_max():
    model = Pair()
    max_norm = 0.5

    def clipped(step):
        grads = model.grads[step]
        norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads))
        return min(1.0, max_norm / (norm + 1e-6))

    want = reference(model, lambda p, g, s, k: p - 0.1 * g * clipped(k), lambda p: None)
    opt = O.SGD(lr=0.1)
    opt.add_hook(O.ClipGrad(max_norm))
    assert_history(run(opt, model), want)
    assert all(clipped(k) < 1 for k in range(STEPS))

    # Below max_norm the gradients pass unchanged.
    model = Pair()
    want = reference(model, lambda p, g, s, k: p - 0.1 * g, lambda p: None)
    opt = O.SGD(lr=0.1)
    opt.add_hook(O.ClipGrad(1e6))
    assert_history(run(opt, model), want)


def test_clip_grad_reassigns_grad_variables():
    model = Pair()
    grads = [Variable(np.full(p.shape, 10.0, np.float32)) for p in model.params()]
    for p, g in zip(model.params(), grads):
        p.grad = g
    O.ClipGrad(1.0)(list(model.params()))
    for p, g in zip(model.params(), grads):
        assert p.grad is not g
        np.testing.assert_array_equal(g.data, 10.0)  # the old gradient is untouched


@pytest.mark.parametrize("make", [O.SGD, O.MomentumSGD, O.Adam])
def test_freeze_param_leaves_frozen_params_unchanged_and_updates_others(make):
    model = Pair()
    w0, b0 = model.w.data.copy(), model.b.data.copy()
    opt = make()
    opt.add_hook(O.ClipGrad(1.0))
    opt.add_hook(O.FreezeParam(model.w))
    run(opt, model)  # the book's FreezeParam made update() crash here
    np.testing.assert_array_equal(model.w.data, w0)
    assert not np.allclose(model.b.data, b0)


def test_freeze_param_accepts_layers():
    class Outer(Layer):
        def __init__(self):
            super().__init__()
            self.inner = Pair()
            self.c = Parameter(np.zeros(2, np.float32))

    model = Outer()
    w0 = model.inner.w.data.copy()
    opt = O.SGD(lr=1.0).setup(model)
    opt.add_hook(O.FreezeParam(model.inner))
    for p in model.params():
        p.grad = Variable(np.ones_like(p.data))
    opt.update()
    np.testing.assert_array_equal(model.inner.w.data, w0)
    np.testing.assert_array_equal(model.c.data, -1.0)


# =============================================================================
# Trace mode: a replayed step updates like an eager one
# =============================================================================


@pytest.mark.parametrize("make", [lambda: O.MomentumSGD(lr=0.1), lambda: O.AdamW(alpha=0.01)])
def test_traced_step_with_lazy_weights_and_state_matches_eager(make):
    import dezero
    import dezero.functions as F
    from dezero.models import MLP

    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((8, 4)).astype(np.float32), rng.integers(0, 3, 8))
            for _ in range(4)]
    runs = []
    state = np.random.get_state()
    for traced in (False, True):
        # Both models draw the same weights at their first call, inside the step.
        np.random.set_state(state)
        model, opt = MLP((5, 3)), make()
        opt.setup(model).add_hook(O.ClipGrad(0.5))

        def step(x, t, model=model, opt=opt):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            opt.update()
            return loss

        if traced:
            step = dezero.trace(step)
        losses = []
        for i, (x, t) in enumerate(data):
            if i == 2:  # a new rate must reach the replayed update
                if isinstance(opt, O.Adam):
                    opt.alpha = 0.05
                else:
                    opt.lr = 0.5
            losses.append(float(step(x, t).data))
        runs.append((losses, [p.data for p in model.params()]))
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=1e-5)
    for eager, replayed in zip(runs[0][1], runs[1][1]):
        np.testing.assert_allclose(replayed, eager, rtol=1e-5, atol=1e-6)
    assert step.entries == 1


def test_hyperparameters_take_the_parameters_float_dtype():
    # float64 parameters get the exact rate; float32 ones stay float32.
    for dtype, expected in ((np.float64, 1.6), (np.float32, np.float32(2.0) - np.float32(0.4))):
        p = Parameter(np.array([2.0], dtype=dtype))
        model = Layer()
        model.p = p
        optimizer = O.SGD(lr=0.1).setup(model)
        p.grad = Variable(np.array([4.0], dtype=dtype))
        optimizer.update()
        assert p.dtype == dtype and optimizer._lr.dtype == dtype
        assert p.data[0] == expected


# =============================================================================
# State belongs to each Parameter: no inheritance through a reused id()
# =============================================================================

STATEFUL = [O.MomentumSGD, O.AdaGrad, O.AdaDelta, O.Adam, O.AdamW]


class Head(Layer):
    def __init__(self):
        super().__init__()
        self.W = Parameter(np.ones(3, np.float32))


def step(opt, model, grad):
    for p in model.params():
        p.grad = Variable(np.full(p.shape, grad, np.float32))
    opt.update()


def new_parameter_at(address):
    """A fresh Parameter that CPython placed at a freed one's address (id)."""
    kept = []
    for _ in range(1000):
        p = Parameter(np.ones(3, np.float32))
        if id(p) == address:
            return p
        kept.append(p)
    pytest.skip("CPython did not reuse the freed address")


@pytest.mark.parametrize("make", STATEFUL)
def test_a_new_parameter_that_reuses_a_freed_id_starts_with_fresh_state(make):
    model, opt = Head(), make()
    opt.setup(model)
    for _ in range(3):
        step(opt, model, 1.0)
    address = id(model.W)
    model.W = None   # the old head is freed ...
    model.W = new_parameter_at(address)   # ... and the new one lands at its address
    step(opt, model, 0.5)
    fresh = Head()
    step(make().setup(fresh), fresh, 0.5)
    np.testing.assert_array_equal(model.W.data, fresh.W.data)


@pytest.mark.parametrize("make", [O.MomentumSGD, O.Adam])
def test_a_new_head_does_not_move_under_a_zero_gradient(make):
    model, opt = Head(), make()
    opt.setup(model)
    for _ in range(3):
        step(opt, model, 1.0)
    address = id(model.W)
    model.W = None
    model.W = new_parameter_at(address)
    step(opt, model, 0.0)
    np.testing.assert_array_equal(model.W.data, 1.0)


@pytest.mark.parametrize("make", STATEFUL)
def test_state_of_parameters_that_are_gone_is_dropped(make):
    model, opt = Head(), make()
    opt.setup(model)
    for _ in range(20):
        model.W = Parameter(np.ones(3, np.float32))   # a new head every step
        step(opt, model, 1.0)
    for slots in ("vs", "hs", "msg", "msdx", "ms", "joined"):
        assert len(getattr(opt, slots, ())) <= 1


def test_parameter_identity_is_object_identity():
    # The state tables rely on it: two equal-valued parameters are two keys.
    a, b = Parameter(np.ones(2)), Parameter(np.ones(2))
    assert type(a).__eq__ is object.__eq__
    assert type(a).__hash__ is object.__hash__ and hash(a) != hash(b)


@pytest.mark.parametrize("make", STATEFUL)
def test_one_optimizer_set_up_with_another_model_updates_it_as_a_fresh_one(make):
    opt = make()
    run(opt, Pair())           # a first model trains for STEPS updates
    second = Pair()
    got = run(opt, second)     # then the same optimizer serves a second model
    want = run(make(), Pair())
    assert_history(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("make", [O.Adam, O.AdamW])
def test_adam_given_a_new_target_directly_updates_it_as_a_fresh_one(make):
    first, second = Pair(), Pair()
    opt = make().setup(first)
    step(opt, first, 1.0)
    opt.target = second        # a new target, assigned directly
    step(opt, second, 1.0)
    fresh = Pair()
    step(make().setup(fresh), fresh, 1.0)
    for p, q in zip(second.params(), fresh.params()):
        np.testing.assert_array_equal(p.data, q.data)


# =============================================================================
# Parameters of several dtypes, and gradients that met another dtype
# =============================================================================

ALL = [O.SGD, O.MomentumSGD, O.AdaGrad, O.AdaDelta, O.Adam, O.AdamW]


class Mixed(Layer):
    """A float64 parameter first, then float32 ones (a float64 first layer)."""

    def __init__(self, dtypes=(np.float64, np.float32, np.float32)):
        super().__init__()
        rng = np.random.RandomState(1)
        for i, dtype in enumerate(dtypes):
            setattr(self, f"p{i}", Parameter(rng.randn(3).astype(dtype)))
        self.grads = [[rng.randn(3).astype(p.dtype) for p in self.params()]
                      for _ in range(STEPS)]


@pytest.mark.parametrize("make", ALL)
def test_each_parameter_is_updated_in_its_own_dtype_as_alone(make):
    # Each parameter moves as under an optimizer of its own: the float32 ones as in
    # a float32 model (bit for bit), the float64 one as in a float64 model.
    got = run(make(), Mixed())
    start = Mixed()
    for i, p in enumerate(start.params()):
        alone = Layer()
        alone.p = Parameter(p.data.copy())
        alone.grads = [[step[i]] for step in start.grads]
        want = run(make(), alone)
        for step in range(STEPS):
            assert got[step][i].dtype == want[step][0].dtype == p.dtype
            np.testing.assert_array_equal(got[step][i], want[step][0])


@pytest.mark.parametrize("make", ALL)
def test_hooks_keep_each_parameter_and_gradient_in_its_dtype(make):
    mixed = Mixed((np.float64, np.float32))
    opt = make()
    opt.add_hook(O.WeightDecay(1e-3))
    opt.add_hook(O.ClipGrad(0.5))
    run(opt, mixed)
    assert [p.dtype for p in mixed.params()] == [np.float64, np.float32]
    assert [p.grad.dtype for p in mixed.params()] == [np.float64, np.float32]
    for slots in ("vs", "hs", "msg", "msdx", "ms"):
        for param, var in getattr(opt, slots, {}).items():
            assert var.dtype == param.dtype


# The default eps of AdaGrad, Adam and AdamW is 0 in float16: the warning that says so
# has its own test below.
@pytest.mark.filterwarnings("ignore:.* is 0 in float16:UserWarning")
@pytest.mark.parametrize("make", ALL)
def test_float16_parameters_are_updated_in_float16(make):
    # Adam's step size is computed from its float32 step count: under numpy 2 a
    # float32 0-d step size turned float16 parameters and their moments float32.
    half = Mixed((np.float16, np.float32))
    opt = make()
    opt.add_hook(O.WeightDecay(1e-3))
    got = run(opt, half)
    assert [p.dtype for p in half.params()] == [np.float16, np.float32]
    for slots in ("vs", "hs", "msg", "msdx", "ms"):
        for param, var in getattr(opt, slots, {}).items():
            assert var.dtype == param.dtype
    want = run(make(), Mixed((np.float64, np.float32)))  # the same values, wider
    np.testing.assert_allclose(got[-1][0], want[-1][0], rtol=2e-2, atol=2e-3)


def test_a_hyperparameter_that_is_0_in_the_parameters_dtype_is_named():
    # Adam's eps = 1e-8 is 0 in float16: a zero gradient gave 0 / 0 = NaN in silence.
    with pytest.warns(UserWarning, match=r"Adam: eps = 1e-08 is 0 in float16.*NaN.*6e-08"):
        run(O.Adam(), Mixed((np.float16,)))
    opt = O.SGD(lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run(O.Adam(eps=1e-4), Mixed((np.float16,)))
        run(opt, Mixed((np.float16,)))
        opt.lr = 0.0  # exactly 0 is what was asked for
    with pytest.warns(UserWarning, match=r"SGD: lr = 1e-09 is 0 in float16"):
        opt.lr = 1e-9  # a schedule's tail


def test_a_rate_set_later_reaches_every_dtype():
    mixed = Mixed((np.float64, np.float32))
    opt = O.SGD(lr=0.1)
    run(opt, mixed)
    before = [p.data.copy() for p in mixed.params()]
    opt.lr = 0.0
    for p in mixed.params():
        p.grad = Variable(np.ones_like(p.data))
    opt.update()
    for b, p in zip(before, mixed.params()):
        np.testing.assert_array_equal(p.data, b)


@pytest.mark.parametrize("make", ALL)
def test_a_float64_batch_leaves_a_float32_model_float32(make):
    # steps/step60.py feeds float64 SinCurve data into a float32 LSTM.
    np.random.seed(0)
    model = L.LSTM(4, in_size=1)
    fc = L.Linear(1, in_size=4)
    model.fc = fc
    opt = make().setup(model)
    x = np.random.rand(5, 1)  # float64
    for _ in range(3):
        model.reset_state()
        loss = F.mean_squared_error(fc(model(x)), np.sin(x))
        model.cleargrads()
        loss.backward()
        assert all(p.grad.dtype == np.float32 for p in model.params() if p.grad is not None)
        opt.update()
    assert all(p.dtype == np.float32 for p in model.params())


@pytest.mark.parametrize("make", [lambda: O.SGD(lr=0.1), lambda: O.Adam(alpha=0.01)])
def test_traced_step_on_mixed_dtypes_matches_eager_and_records_once(make):
    import dezero
    runs = []
    for traced in (False, True):
        model, opt = Mixed(), make()
        opt.setup(model).add_hook(O.WeightDecay(0.01))

        def step(k, model=model, opt=opt):
            loss = F.sum(F.square(model.p0)) + F.sum(model.p1 * model.p2) * k
            model.cleargrads()
            loss.backward()
            opt.update()
            return loss

        if traced:
            step = dezero.trace(step)
        for i in range(4):
            if i == 2:  # a new rate reaches both dtypes' updates
                setattr(opt, "alpha" if isinstance(opt, O.Adam) else "lr", 0.05)
            step(np.array(i + 1, np.float32))
        runs.append([p.data for p in model.params()])
    for eager, replayed in zip(*runs):
        assert replayed.dtype == eager.dtype
        np.testing.assert_allclose(replayed, eager, rtol=1e-6)
    assert step.entries == 1


@pytest.mark.parametrize("make, name, value, interval", [
    (lambda v: O.Adam(beta1=v), "beta1", 1.0, r"in \[0, 1\)"),
    (lambda v: O.AdamW(beta2=v), "beta2", 1.5, r"in \[0, 1\)"),
    (lambda v: O.Adam(beta1=v), "beta1", -0.1, r"in \[0, 1\)"),
    (lambda v: O.AdaDelta(rho=v), "rho", 1.01, r"in \[0, 1\]"),
    (lambda v: O.SGD(lr=v), "lr", -0.1, "a finite number >= 0"),
    (lambda v: O.MomentumSGD(momentum=v), "momentum", float("nan"), "a finite number >= 0"),
    (lambda v: O.AdaGrad(eps=v), "eps", -1e-8, "a finite number >= 0"),
    (lambda v: O.Adam(alpha=v), "alpha", float("inf"), "a finite number >= 0"),
    (lambda v: O.AdamW(weight_decay=v), "weight_decay", -0.01, "a finite number >= 0"),
    (lambda v: O.WeightDecay(v), "rate", -1.0, "a finite number >= 0"),
    (lambda v: O.ClipGrad(v), "max_norm", float("nan"), "a finite number >= 0")], ids=str)
def test_impossible_hyperparameters_raise_naming_the_optimizer_and_the_range(
        make, name, value, interval):
    # Adam(beta1=1.0) divided by 1 - beta1 ** t = 0 and turned every weight into NaN.
    with pytest.raises(ValueError, match=rf"\w+: {name} must be {interval}, got"):
        make(value)


def test_a_hyperparameter_set_later_is_checked_too_and_the_old_value_kept():
    opt = O.Adam()
    with pytest.raises(ValueError, match="Adam: beta1 must be in"):
        opt.beta1 = 1.0
    assert opt.beta1 == 0.9 and float(opt._beta1.data) == np.float32(0.9)
    O.Adam(beta1=0.0, beta2=0.0, eps=0.0)  # the edges PyTorch allows


def test_torch_refuses_beta1_of_one_too(torch):
    with pytest.raises(ValueError, match="beta"):
        torch.optim.Adam([torch.zeros(1, requires_grad=True)], betas=(1.0, 0.999))
