"""State in a traced graph is named by where the traced code reaches it, in the printed
graph, the drawing and the replay code: a model's parameter by its path in the model,
an optimizer's slot by the parameter it belongs to, a hyperparameter by its name."""
import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable, models, optimizers

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
    names = [n.outputs[0].name for n in graph.of_kind("state")]
    for name in ["model_layers_0_W", "model_layers_1_b", "optimizer_t", "optimizer_alpha",
                 "optimizer_ms_layers_0_W", "optimizer_vs_layers_1_b", "scale"]:
        assert name in names
    text = str(graph)
    assert "optimizer_ms_layers_0_W <- " in text and "model_layers_0_W.grad <- " in text
    code = graph.compile("python").source
    assert "_s_model_layers_0_W._data = " in code and "_s0" not in code
    assert "model_layers_0_W" in graph.to_dot()


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
