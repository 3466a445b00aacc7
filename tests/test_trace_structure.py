"""Structure guards: a traced step whose model, optimizer or globals change retraces,
checked against the same step run eagerly on a twin, over several calls."""
import copy

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import layers as L
from dezero import models, optimizers


class Net(models.Model):
    extra = None  # a layer added later, if any

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = L.Linear(5, in_size=4), L.Linear(3, in_size=5)
        self.act = F.sigmoid

    def forward(self, x):
        y = self.fc2(self.act(self.fc1(x)))
        return y if self.extra is None else y + self.extra(x)


def make_step(model, optimizer):
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def batches(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6))
            for _ in range(n)]


def twin(obj, memo):
    """obj for the eager side, and a deep copy for the traced side (same weights)."""
    return obj, copy.deepcopy(obj, memo)


replaced = []  # kept alive: optimizers key their slots by id(param), which a new
# parameter could otherwise reuse on one side and not the other


def replace_layer(m, o, made):
    replaced.append(m.fc2)
    m.fc2 = made(L.Linear(3, in_size=5))


def add_layer(m, o, made):
    m.extra = made(L.Linear(3, in_size=4))


def remove_parameter(m, o, made):
    m.fc1.b = None


def delete_layer_added_before(m, o, made):
    if m.extra is None:
        m.extra = made(L.Linear(3, in_size=4))
    else:
        del m.extra


def swap_activation(m, o, made):
    m.act = F.relu


def add_hook(m, o, made):
    o.add_hook(optimizers.WeightDecay(0.5))


def remove_hook(m, o, made):
    if o.hooks:
        o.hooks.pop()
    else:
        o.add_hook(optimizers.WeightDecay(0.5))


def clear_optimizer_state(m, o, made):
    o.vs.clear()


def setup_other(m, o, made):
    o.setup(m.fc1)  # only the first layer is trained from now on


@pytest.mark.parametrize("change", [
    replace_layer, add_layer, remove_parameter, delete_layer_added_before, swap_activation,
    add_hook, remove_hook, clear_optimizer_state, setup_other])
def test_structure_change_retraces_and_replays_like_eager(change):
    a = Net()
    b = copy.deepcopy(a)
    opt_a = optimizers.MomentumSGD(lr=0.5).setup(a)
    opt_b = optimizers.MomentumSGD(lr=0.5).setup(b)
    eager, traced = make_step(a, opt_a), dezero.trace(make_step(b, opt_b))
    for i, (x, t) in enumerate(batches()):
        if i in (3, 6):  # change both twins alike, then keep stepping
            made = []
            change(a, opt_a, lambda layer: made.append(layer) or layer)
            copies = iter([copy.deepcopy(layer) for layer in made])
            change(b, opt_b, lambda layer: next(copies))
        le, lt = eager(x, t), traced(x, t)
        np.testing.assert_allclose(lt.data, le.data, rtol=1e-5, atol=1e-6)
        for pa, pb in zip(a.params(), b.params()):
            np.testing.assert_allclose(pb.data, pa.data, rtol=1e-5, atol=1e-6)
    assert traced.entries <= 2


def test_retrace_reason_names_the_replaced_layer(capsys):
    a = Net()
    opt = optimizers.SGD(0.1).setup(a)
    traced = dezero.trace(make_step(a, opt))
    x, t = batches(1)[0]
    with dezero.static.debug(1):
        traced(x, t), traced(x, t), traced(x, t)
        a.fc2 = L.Linear(3, in_size=5)
        traced(x, t)
        a.act = F.relu
        traced(x, t)
        opt.add_hook(optimizers.WeightDecay(0.1))
        traced(x, t)
    err = capsys.readouterr().err
    assert "retrace step: model.fc2 was replaced or removed" in err
    assert "retrace step: model.act was replaced or removed" in err
    assert "retrace step: optimizer.hooks changed" in err
    assert traced.entries == 1  # graphs of an old structure are dropped


model_in_cell = optimizer_in_cell = None


def step_reading_globals(x, t):
    loss = F.softmax_cross_entropy(model_in_cell(x), t)
    model_in_cell.cleargrads()
    loss.backward()
    optimizer_in_cell.update()
    return loss


def test_rebuilding_the_model_under_the_same_global_name_retraces(capsys):
    global model_in_cell, optimizer_in_cell
    traced = dezero.trace(step_reading_globals)
    eager_model = None
    for i, (x, t) in enumerate(batches(6)):
        if i % 3 == 0:  # the notebook cell that builds the model runs again
            eager_model = Net()
            eager_opt = optimizers.SGD(0.5).setup(eager_model)
            model_in_cell = copy.deepcopy(eager_model)
            optimizer_in_cell = optimizers.SGD(0.5).setup(model_in_cell)
        le = make_step(eager_model, eager_opt)(x, t)
        with dezero.static.debug(1):
            lt = traced(x, t)
        np.testing.assert_allclose(lt.data, le.data, rtol=1e-5, atol=1e-6)
        for pa, pb in zip(eager_model.params(), model_in_cell.params()):
            np.testing.assert_allclose(pb.data, pa.data, rtol=1e-5, atol=1e-6)
    assert "global model_in_cell was replaced" in capsys.readouterr().err


def test_closure_variable_rebound_retraces():
    scale = dezero.Variable(np.array(2.0, np.float32))

    def f(x):
        return x * scale

    traced = dezero.trace(f)
    x = np.ones(3, np.float32)
    traced(x), traced(x)
    scale = dezero.Variable(np.array(3.0, np.float32))  # noqa: F841 (read by f)
    np.testing.assert_allclose(traced(x).data, 3.0)


def test_guards_are_cheap_for_a_small_step():
    a = Net()
    traced = dezero.trace(make_step(a, optimizers.SGD(0.1).setup(a)))
    x, t = batches(1)[0]
    traced(x, t), traced(x, t)
    structure = next(iter(traced._cache.values()))[0].structure
    # The model, its class's methods, its two layers, the optimizer and the globals:
    # one check each.
    assert len(structure.namespaces) == 6 and structure.changed() is None


activation_in_cell = F.sigmoid


class NetReadingAGlobal(models.Model):
    def __init__(self):
        super().__init__()
        self.fc = L.Linear(3, in_size=4)

    def forward(self, x):
        return activation_in_cell(self.fc(x))


def test_a_global_read_by_a_model_method_rebound_retraces():
    global activation_in_cell
    model = NetReadingAGlobal()
    traced = dezero.trace(lambda x: model(x))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    try:
        for act in (F.sigmoid, F.sigmoid, F.tanh, F.tanh, F.relu):
            activation_in_cell = act  # a notebook cell run again with another choice
            np.testing.assert_allclose(traced(x).data, act(model.fc(x)).data, rtol=1e-6)
    finally:
        activation_in_cell = F.sigmoid


def test_a_traced_function_called_inside_counts_with_what_it_reads():
    weight = dezero.Variable(np.array(2.0, np.float32))

    @dezero.trace
    def inner(x):
        return x * weight

    outer = dezero.trace(lambda x: inner(x) + 1.0)
    x = np.ones(2, np.float32)
    outer(x), outer(x)
    weight = dezero.Variable(np.array(5.0, np.float32))  # noqa: F841 (read by inner)
    np.testing.assert_allclose(outer(x).data, 6.0)
    structure = next(iter(outer._cache.values()))[0].structure
    assert all("graph" not in label for *_, label, _ in structure.namespaces)


class NetWithAMethod(models.Model):
    def __init__(self):
        super().__init__()
        self.fc = L.Linear(3, in_size=4)

    def forward(self, x):
        return F.sigmoid(self.fc(x))


@pytest.mark.parametrize("reach", ["global", "dict holding the class first"])
def test_a_method_rebound_on_the_models_class_retraces(reach):
    model = NetWithAMethod()
    cell = {"Net": NetWithAMethod, "model": model}  # the class is met before the model
    traced = dezero.trace((lambda x: model(x)) if reach == "global" else
                          (lambda x: cell["model"](x)))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    original = NetWithAMethod.forward
    try:
        for act in (F.sigmoid, F.sigmoid, F.tanh, F.tanh):
            NetWithAMethod.forward = lambda self, x, act=act: act(self.fc(x))  # patched
            np.testing.assert_allclose(traced(x).data, act(model.fc(x)).data, rtol=1e-6)
    finally:
        NetWithAMethod.forward = original


class ScaledNet(models.Model):
    def __init__(self):
        super().__init__()
        self.fc, self.bn = L.Linear(3, in_size=4), L.BatchNorm()
        self.scale = 1.0

    def forward(self, x):
        return self.bn(self.fc(x)) * self.scale


def test_a_number_held_by_a_layer_or_model_changed_retraces():
    a = ScaledNet()
    b = copy.deepcopy(a)
    eager, traced = (lambda x: a(x)), dezero.trace(lambda x: b(x))
    rng = np.random.default_rng(3)
    for i in range(6):
        if i == 2:  # a hyperparameter of the model, and BatchNorm's momentum
            a.scale = b.scale = 3.0
        if i == 4:
            a.bn.decay = b.bn.decay = 0.5
        x = rng.standard_normal((5, 4)).astype(np.float32)
        np.testing.assert_allclose(traced(x).data, eager(x).data, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b.bn.avg_mean.data, a.bn.avg_mean.data, rtol=1e-5)
    assert traced.entries == 1  # the old graphs are dropped


def test_an_optimizers_hyperparameter_set_between_calls_replays_without_retracing():
    model = Net()
    optimizer = optimizers.Adam(0.01).setup(model)
    traced = dezero.trace(make_step(model, optimizer))
    x, t = batches(1)[0]
    traced(x, t)
    for i in range(4):
        optimizer.alpha = 0.01 / (i + 1)  # read afresh from its Variable
        traced(x, t)
    assert traced.entries == 1 and len(traced._cache) == 1


offsets_in_cell = np.array([0.5, -1.0, 2.0], np.float32)


def test_a_global_array_alone_replays_instead_of_recording_every_call(capsys):
    def centre(x):
        return x - offsets_in_cell  # the only global the function names

    traced = dezero.trace(centre)
    with dezero.static.debug(1):
        for i in range(4):
            np.testing.assert_array_equal(traced(np.full(3, i, np.float32)).data,
                                          np.full(3, i, np.float32) - offsets_in_cell)
    assert capsys.readouterr().err.count("trace") == 1


class MaskedNet(models.Model):
    def __init__(self):
        super().__init__()
        self.fc = L.Linear(3, in_size=4)
        self.mask = np.ones(3, np.float32)

    def forward(self, x):
        return self.fc(x) * self.mask - offsets_in_cell


def test_arrays_read_as_constants_changed_in_place_or_replaced_retrace():
    a = MaskedNet()
    b = copy.deepcopy(a)
    eager, traced = (lambda x: a(x)), dezero.trace(lambda x: b(x))
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    try:
        for i in range(8):
            if i in (2, 3):  # a mask set in place, as a notebook might
                a.mask[i - 2] = b.mask[i - 2] = 0.0
            if i == 5:
                a.mask = np.full(3, 2.0, np.float32)
                b.mask = np.full(3, 2.0, np.float32)
            if i == 6:
                offsets_in_cell[...] = 3.0  # a global, in place
            np.testing.assert_array_equal(traced(x).data, eager(x).data, err_msg=f"call {i}")
    finally:
        offsets_in_cell[...] = [0.5, -1.0, 2.0]


table_in_cell = np.array([1.0, 2.0, 4.0], np.float32)


def test_arrays_named_and_read_with_numpy_changed_in_place_retrace():
    # np.sum(table) leaves no node in the graph, only the number it gave.
    weights = np.ones(3, np.float32)
    layer = L.Linear(3)
    layer.table = np.ones(2)

    def f(x):
        return (x * np.sum(table_in_cell) + weights.max() + float(table_in_cell[0])
                + np.sum(layer.table))

    traced = dezero.trace(f)
    x = np.arange(3, dtype=np.float32)
    try:
        for i in range(7):
            if i == 2:
                table_in_cell[1] = 10.0  # a global, in place
            if i == 4:
                weights[...] = 5.0  # a closure variable, in place
            if i == 5:
                layer.table[0] = 3.0  # a layer's, in place
            np.testing.assert_array_equal(traced(x).data, f(x), err_msg=f"call {i}")
    finally:
        table_in_cell[...] = [1.0, 2.0, 4.0]


settings_in_cell = {"scale": 2.0, "mode": "tanh"}


def test_a_number_or_name_in_a_dict_the_function_reads_changed_retraces():
    def f(x):
        act = F.tanh if settings_in_cell["mode"] == "tanh" else F.sigmoid
        return act(x) * settings_in_cell["scale"]

    traced = dezero.trace(f)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    try:
        for scale, mode in ((2.0, "tanh"), (2.0, "tanh"), (3.0, "tanh"), (3.0, "sigmoid")):
            settings_in_cell.update(scale=scale, mode=mode)  # a config cell run again
            np.testing.assert_allclose(traced(x).data, f(x).data, rtol=1e-6)
    finally:
        settings_in_cell.update(scale=2.0, mode="tanh")


class Settings:  # a class used as a namespace of settings
    scale = 2.0


def test_a_number_on_a_settings_class_changed_retraces():
    def f(x):
        return F.tanh(x) * Settings.scale

    traced = dezero.trace(f)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    try:
        for scale in (2.0, 2.0, 5.0, 5.0):
            Settings.scale = scale
            np.testing.assert_allclose(traced(x).data, f(x).data, rtol=1e-6)
    finally:
        Settings.scale = 2.0


def test_a_number_of_a_users_config_module_changed_retraces(monkeypatch):
    import sys
    import types

    config = types.ModuleType("trace_test_config")  # as `import config` would give
    config.scale = 2.0
    monkeypatch.setitem(sys.modules, config.__name__, config)

    def f(x):
        return F.tanh(x) * config.scale

    traced = dezero.trace(f)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    for scale in (2.0, 2.0, 5.0, 5.0):
        config.scale = scale
        np.testing.assert_allclose(traced(x).data, f(x).data, rtol=1e-6)


def test_a_number_a_data_loader_holds_read_in_the_step_retraces():
    from dezero import DataLoader

    loader = DataLoader(dezero.datasets.Spiral(train=True), 100, shuffle=False)
    W = dezero.Variable(np.ones((2, 3), np.float32))

    def step(x):  # a schedule read from the loader
        return F.matmul(x, W) * (1.0 - loader.iteration / loader.max_iter)

    traced = dezero.trace(step)
    for x, _ in loader:
        np.testing.assert_allclose(traced(x).data, step(x).data, rtol=1e-6)


calls_in_cell = 0


def test_a_structure_that_changes_at_every_call_runs_eagerly_with_one_warning(capsys):
    global calls_in_cell

    def f(x):
        return F.tanh(x) * (calls_in_cell + 1)  # a number changed before every call

    traced = dezero.trace(f, max_entries=3)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    with dezero.static.debug(1), pytest.warns(UserWarning, match="calls_in_cell") as caught:
        for i in range(10):
            calls_in_cell = i
            np.testing.assert_allclose(traced(x).data, f(x).data, rtol=1e-6)
    calls_in_cell = 0
    assert len(caught) == 1  # said once, then eager without recording
    assert capsys.readouterr().err.count("trace f") <= 4


clip_in_cell = 1.0


def scale_gradients(params):  # a user's optimizer hook reading a global
    for param in params:
        param.grad.data = (param.grad * clip_in_cell).data


def test_a_global_read_by_a_users_hook_rebound_retraces():
    global clip_in_cell
    a = Net()
    b = copy.deepcopy(a)
    opt_a, opt_b = optimizers.SGD(0.5).setup(a), optimizers.SGD(0.5).setup(b)
    opt_a.add_hook(scale_gradients), opt_b.add_hook(scale_gradients)
    eager, traced = make_step(a, opt_a), dezero.trace(make_step(b, opt_b))
    try:
        for i, (x, t) in enumerate(batches(6)):
            clip_in_cell = 1.0 if i < 3 else 10.0
            np.testing.assert_allclose(traced(x, t).data, eager(x, t).data, rtol=1e-5)
    finally:
        clip_in_cell = 1.0


scale_of_scaled = 2.0  # a module-level number a helper function reads


def scaled(x, k=1.0):
    return F.tanh(x) * scale_of_scaled * k


class HoldsAFunction:
    def __init__(self, fn):
        self.fn = fn


@pytest.mark.parametrize("reach", ["dict", "list", "attribute", "partial", "direct"])
def test_a_global_number_read_by_a_function_reached_through_a_container_retraces(reach):
    import functools
    global scale_of_scaled
    held = {"dict": {"f": scaled}, "list": [scaled], "attribute": HoldsAFunction(scaled),
            "partial": functools.partial(scaled, k=1.0), "direct": scaled}[reach]
    call = {"dict": lambda x: held["f"](x), "list": lambda x: held[0](x),
            "attribute": lambda x: held.fn(x), "partial": lambda x: held(x),
            "direct": lambda x: held(x)}[reach]
    traced = dezero.trace(call)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    try:
        for scale in (2.0, 2.0, 5.0, 5.0, 3.0):
            scale_of_scaled = scale
            np.testing.assert_allclose(traced(x).data, call(x).data, rtol=1e-6)
    finally:
        scale_of_scaled = 2.0
    assert traced.entries <= 3


@pytest.mark.parametrize("reach", ["dict", "list", "attribute"])
def test_a_function_replaced_in_a_container_retraces(reach):
    held = {"dict": {"f": F.tanh}, "list": [F.tanh], "attribute": HoldsAFunction(F.tanh)}[reach]
    call = {"dict": lambda x: held["f"](x), "list": lambda x: held[0](x),
            "attribute": lambda x: held.fn(x)}[reach]
    traced = dezero.trace(call)
    x = np.linspace(-1, 1, 6, dtype=np.float32)
    for fn in (F.tanh, F.tanh, F.sigmoid, F.sigmoid, scaled):
        if reach == "attribute":
            held.fn = fn
        else:
            held["f" if reach == "dict" else 0] = fn
        np.testing.assert_allclose(traced(x).data, call(x).data, rtol=1e-6)
