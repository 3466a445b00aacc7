"""State in a traced graph is named by where the traced code reaches it, in the printed
graph, the drawing and the replay code: a model's parameter by its path in the model,
an optimizer's slot by the parameter it belongs to, a hyperparameter by its name."""
import numpy as np

import dezero
import dezero.functions as F
from dezero import Model, Variable, models, optimizers
from dezero import layers as L
from dezero.static import backends
from dezero.static.names import dotted

model = models.MLP((4, 2))
optimizer = optimizers.Adam(0.01).setup(model)
scale = Variable(np.array(2.0, np.float32), name="s")  # named s, reached as `scale`


@dezero.trace
def step(x, t):
    loss = F.mean_squared_error(model(x) * scale, t)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    return loss


def test_state_is_named_by_where_the_step_reaches_it():
    x, t = np.ones((3, 2), np.float32), np.zeros((3, 2), np.float32)
    step(x, t)
    step(x, t)
    graph = step.graph
    places = [n.outputs[0].label for n in graph.of_kind("state")]
    # The shortest path: MLP's first layer is model.l0 as well as model.layers[0].
    for place in ["model.l0.W", "model.l1.b", "optimizer.t", "optimizer.alpha",
                  "optimizer.ms[l0.W]", "optimizer.vs[l1.b]", "scale"]:
        assert place in places
    text = str(graph)
    assert "captures model.l0.W: f32[2,4], model.l0.b: f32[4]," in text
    assert "\n  optimizer.ms[l0.W] <- " in text and "\n  model.l0.W.grad <- " in text
    assert "optimizer.t <- " in text and "= linear(x, model.l0.W)\n" in text
    assert "model.l0.b)\n" in text  # the bias add, an epilogue of the matmul
    # Generated code binds identifiers made from the places, and says the place.
    names = [n.outputs[0].name for n in graph.of_kind("state")]
    assert {"model_l0_W", "optimizer_ms_l0_W", "optimizer_t", "scale"} <= set(names)
    code = graph.compile("python").source
    assert "_s_model_l0_W._data = " in code and "_s0" not in code
    assert "_s_optimizer_ms_l0_W._data = " in code and "# optimizer.ms[l0.W] <- " in code
    assert "optimizer_ms_l0_W = _s_optimizer_ms_l0_W._data  # optimizer.ms[l0.W]\n" in code
    assert '"model_l0_W" [label="model.l0.W: f32[2,4]"' in graph.to_dot()


def _state_places(graph):
    return [n.outputs[0].label for n in graph.of_kind("state")]


def _training_step(model, optimizer):
    def train(x, t):
        loss = F.mean_squared_error(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return train


def test_optimizer_slots_are_named_by_the_parameter_they_belong_to():
    lin = L.Linear(3, in_size=2)
    sgd = optimizers.MomentumSGD(0.1).setup(lin)

    def train(x, t):
        loss = F.mean_squared_error(lin(x), t)
        lin.cleargrads()
        loss.backward()
        sgd.update()
        return loss

    graph = dezero.trace(train).lower(np.ones((4, 2), np.float32), np.zeros((4, 3), np.float32))
    assert set(_state_places(graph)) == {"lin.W", "lin.b", "sgd.lr", "sgd.momentum",
                                         "sgd.vs[W]", "sgd.vs[b]"}
    text = str(graph)
    assert "sgd.vs[W] <- " in text and "lin.W <- " in text and "lin.b.grad <- " in text
    assert [n.outputs[0].name for n in graph.of_kind("state")
            if n.outputs[0].label == "sgd.vs[W]"] == ["sgd_vs_W"]


class _Block(Model):
    def __init__(self):
        super().__init__()
        self.layers = [L.Linear(4), L.Linear(2)]  # a plain list: only the list holds them

    def forward(self, x):
        for layer in self.layers:
            x = F.tanh(layer(x))
        return x


class _Net(Model):
    def __init__(self):
        super().__init__()
        self.enc = _Block()
        self.heads = {"out": L.Linear(2, in_size=2)}

    def forward(self, x):
        return self.heads["out"](self.enc(x))


def test_nested_layers_lists_and_dicts_are_named_by_their_path():
    net = _Net()
    net(np.ones((1, 3), np.float32))  # initialise the lazy layers
    graph = dezero.trace(lambda x: net(x)).lower(np.ones((5, 3), np.float32))
    assert _state_places(graph) == ["net.enc.layers.0.W", "net.enc.layers.0.b",
                                    "net.enc.layers.1.W", "net.enc.layers.1.b",
                                    "net.heads.out.W", "net.heads.out.b"]
    assert [n.outputs[0].name for n in graph.of_kind("state")][:2] == [
        "net_enc_layers_0_W", "net_enc_layers_0_b"]
    assert "linear(x, net.enc.layers.0.W)\n" in str(graph)
    assert "net.enc.layers.0.b)\n" in str(graph)


def test_two_models_with_the_same_attribute_names_stay_distinct():
    np.random.seed(0)
    m1, m2 = models.MLP((3, 2)), models.MLP((3, 2))
    opt1, opt2 = optimizers.Adam().setup(m1), optimizers.Adam().setup(m2)

    def step(x, t):
        loss = F.mean_squared_error(m1(x) + m2(x), t)
        m1.cleargrads()
        m2.cleargrads()
        loss.backward()
        opt1.update()
        opt2.update()
        return loss

    graph = dezero.trace(step).lower(np.ones((4, 2), np.float32), np.zeros((4, 2), np.float32))
    places = _state_places(graph)
    names = [n.outputs[0].name for n in graph.of_kind("state")]
    assert len(set(places)) == len(places) and len(set(names)) == len(names)
    for place in ["m1.l0.W", "m2.l0.W", "opt1.ms[l0.W]", "opt2.ms[l0.W]", "opt1.t", "opt2.t"]:
        assert place in places
    text = str(graph)
    assert "m1.l0.W <- " in text and "m2.l0.W <- " in text


def test_one_optimizer_over_two_models_names_its_slots_in_full():
    np.random.seed(0)
    m1, m2 = models.MLP((2,)), models.MLP((2,))
    pair = Model()
    pair.a, pair.b = m1, m2
    opt = optimizers.Adam().setup(pair)

    def step(x, t):
        loss = F.mean_squared_error(m1(x) + m2(x), t)  # reached as m1 and m2
        pair.cleargrads()
        loss.backward()
        opt.update()
        return loss

    x, t = np.ones((4, 2), np.float32), np.zeros((4, 2), np.float32)
    places = _state_places(dezero.trace(step).lower(x, t))
    assert "opt.ms[m1.l0.W]" in places and "opt.ms[m2.l0.W]" in places
    assert len(set(places)) == len(places)


def test_a_model_reached_first_through_its_optimizer_keeps_the_shorter_name():
    np.random.seed(0)
    net = models.MLP((3, 2))
    adam = optimizers.Adam().setup(net)  # the walk meets adam (and adam.target) first

    def step(x, t):
        loss = F.mean_squared_error(net(x), t)
        net.cleargrads()
        loss.backward()
        adam.update()
        return loss

    graph = dezero.trace(step).lower(np.ones((4, 2), np.float32), np.zeros((4, 2), np.float32))
    places = _state_places(graph)
    assert places[:4] == ["net.l0.W", "net.l0.b", "net.l1.W", "net.l1.b"]
    assert "adam.ms[l0.W]" in places and not any("target" in p for p in places)


def test_no_computed_value_is_named_like_the_root_of_a_place():
    m = models.MLP((3, 2))
    sgd = optimizers.SGD().setup(m)

    def step(x, t):
        loss = F.mean_squared_error(m(x), t)
        m.cleargrads()
        loss.backward()
        sgd.update()
        return loss

    graph = dezero.trace(step).lower(np.ones((4, 2), np.float32), np.ones((4, 2), np.float32))
    bound = [v.name for n in graph.nodes if n.kind in ("op", "const") for v in n.outputs]
    assert len(bound) > 12 and "m" not in bound  # a, b ... l, then n: m is the model


def test_the_named_step_replays_the_same_on_every_backend():
    np.random.seed(1)
    mlp = models.MLP((4, 2))
    adam = optimizers.Adam(0.05).setup(mlp)
    x, t = np.random.randn(3, 2).astype(np.float32), np.zeros((3, 2), np.float32)
    eager = _training_step(mlp, adam)
    eager(x, t)  # makes Adam's slots
    graph = dezero.trace(eager).lower(x, t)
    assert "optimizer.ms[l0.W] <- " in str(graph)
    state = [n.payload.var for n in graph.of_kind("state") if n.attrs["field"] == "data"]
    start = [v.data.copy() for v in state]
    loss = eager(x, t).data
    want = [v.data.copy() for v in state]
    for backend in [b for b in backends.BACKENDS if b != "cupy"]:
        for v, data in zip(state, start):
            v.data = data.copy()
            v.cleargrad()
        got = graph.compile(backend).run([x, t])
        np.testing.assert_allclose(got.data, loss, rtol=1e-5, err_msg=backend)
        for v, data in zip(state, want):
            np.testing.assert_allclose(v.data, data, rtol=1e-5, atol=1e-6, err_msg=backend)


def test_saved_graphs_keep_places_and_version_1_files_still_load(tmp_path):
    import json

    from dezero.static.graph import StaticGraph

    x, t = np.ones((3, 2), np.float32), np.zeros((3, 2), np.float32)
    graph = step.lower(x, t)
    graph.save(str(tmp_path / "g.json"))
    text = (tmp_path / "g.json").read_text()
    assert '"place": "optimizer.ms[l0.W]"' in text
    loaded = StaticGraph.load(str(tmp_path / "g.json"))
    assert _state_places(loaded) == _state_places(graph)
    assert "optimizer.ms[l0.W] <- " in str(loaded)
    # A version 1 file has no places: it loads, and prints the names.
    description = json.loads(text)
    description["version"] = 1
    for node in description["nodes"]:
        for value in node["outputs"]:
            value.pop("place", None)
    (tmp_path / "g.json").write_text(json.dumps(description))
    old = StaticGraph.load(str(tmp_path / "g.json"))
    assert "optimizer_ms_l0_W <- " in str(old) and "." not in "".join(_state_places(old))
    np.testing.assert_array_equal(old(x, t).data, loaded(x, t).data)  # one step each


def test_places_with_odd_keys_print_draw_save_and_load(tmp_path):
    from dezero.static.graph import StaticGraph

    weights = {"a b\n\"q": Variable(np.ones(3, np.float32)), 0: Variable(np.ones(3, np.float32)),
               "0": Variable(np.full(3, 2.0, np.float32))}

    def f(x):
        return F.sum(x * weights["a b\n\"q"] + weights[0] * weights["0"])

    graph = dezero.trace(f).lower(np.ones(3, np.float32))
    places = _state_places(graph)
    # escaped onto one line; the int 0 and the string "0" stay apart
    assert places == ["weights['a b\\n\"q']", "weights.0", "weights['0']"]
    assert all(name.isidentifier() for name in [n.outputs[0].name
                                                for n in graph.of_kind("state")])
    assert "mul(weights['a b\\n\"q'], x)" in str(graph)
    assert str(graph).splitlines()[0].endswith("weights['0']: f32[3]")  # one header line
    assert "label=\"weights['a b\\\\n\\\"q']: f32[3]\"" in graph.to_dot()
    graph.save(str(tmp_path / "g.json"))
    loaded = StaticGraph.load(str(tmp_path / "g.json"))
    assert list(loaded.state) == places
    assert float(loaded(np.ones(3, np.float32)).data) == float(graph(np.ones(3, np.float32)).data)


def test_dotted_spells_indices_and_identifier_keys_as_steps():
    assert dotted("m.layers[0].W") == "m.layers.0.W"
    assert dotted("opt.ms[layers[12].W]") == "opt.ms[layers.12.W]"
    assert dotted("cfg['w'].b") == "cfg.w.b"
    # Keys that are no identifier keep their brackets: "0" is not the index 0.
    assert dotted("cfg['0']") == "cfg['0']" and dotted("cfg['a b']") == "cfg['a b']"


def test_replay_guards_are_named_records_that_check_and_explain():
    from dezero.static.trace import GradUnset, StateType

    w = Variable(np.ones(3, np.float32), name="w")

    @dezero.trace
    def f(x):
        y = F.sum(x * w)
        y.backward()
        return y

    x = Variable(np.ones(3, np.float32))
    f(x)
    w.cleargrad()
    x.cleargrad()
    f(x)
    (entry,), = f._cache.values()
    state, = entry.types
    assert isinstance(state, StateType) and state.name == "w" and state.check()
    assert [type(g) for g in entry.grad_unset] == [GradUnset]
    w.grad = Variable(np.zeros(3, np.float32))  # backward() would add to it
    assert not entry.grad_unset[0].check()
    assert entry.guard_failure([x]) == "state w.grad None -> set"
    w.cleargrad()
    w.data = np.ones(4, np.float32)
    assert not state.check() and state.explain() == "state w f32[3] -> f32[4]"
