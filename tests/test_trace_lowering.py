"""The program (lowering.py): one list of steps, made after fusion, that every backend runs."""
import numpy as np
import pytest
from train_helpers import linear_regression_step

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.kernels import cpu
from dezero.kernels.codegen import kernel_spec
from dezero.models import MLP
from dezero.static import backends
from dezero.static.backends import interpreter
from dezero.static.lowering import STEP_KINDS, lower


def test_the_program_of_a_training_step_reads_runs_stores_frees_and_returns_in_order():
    step, x, t = linear_regression_step()
    program = lower(step.lower(x, t))
    kinds = [s.kind for s in program.steps]
    # linear(x, W), then one kernel: the bias add, the loss's gradient and its sum for
    # b.grad; one horizontal kernel updates W and b
    assert kinds == ["read"] * 3 + ["node", "kernel", "store", "node", "free", "node", "node",
                                    "store", "free", "kernel", "store", "store", "return"]
    assert {s.kind for s in program.steps} <= set(STEP_KINDS)
    k0 = next(s for s in program.steps if s.kind == "kernel")
    assert [s.kind for s in k0.body] == ["node", "free", "node", "node", "free", "node"]
    # The store comes right after the value it stores: W.grad <- i after i's matmul.
    at = {str(s): i for i, s in enumerate(program.steps)}
    assert at["store W.grad <- i"] == at["i: f32[3,1] = matmul(h, g)"] + 1
    text = str(program)
    assert text.startswith("program step(x: f32[8,3], t: f32[8,1])\n  W: f32[3,1] = state")
    assert "  store b <- n\n  return e" in text


def adam_step():
    model = MLP((64, 3))
    optimizer = optimizers.Adam().setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    return step, model


@pytest.mark.skipif(cpu.missing_reason() is not None, reason=str(cpu.missing_reason()))
def test_interpreter_python_and_cpu_run_one_program_with_one_store_per_write():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    t = rng.integers(0, 3, 256)
    eager_step, eager_model = adam_step()
    traced_fn, model = adam_step()
    traced = dezero.trace(traced_fn)
    for first_call in (traced, eager_step):
        np.random.seed(0)  # the layers draw their weights in their first call
        first_call(x, t)
    graph = traced.lower(x, t)
    plans = {name: backends.compile(graph, name).wait()
             for name in ("interpreter", "python", "cpu")}
    texts = {name: str(plan.program) for name, plan in plans.items()}
    assert len(set(texts.values())) == 1, "every backend lowers the graph alike"
    program = plans["cpu"].program
    writes = graph.of_kind("write")
    stores = [s for s in program.steps if s.kind == "store"]
    assert sorted(map(id, (s.node for s in stores))) == sorted(map(id, writes))
    kernels = [s for s in program.steps if s.kind == "kernel"]
    assert kernels and all(kernel_spec(s.group) is s.group.spec for s in kernels)
    assert any(s.group.compiled for s in kernels)
    # The python backend prints each store once; the interpreter applies each once.
    for name in ("python", "cpu"):
        source = plans[name].source
        assert sum(f"# {s.node!r}" in source for s in stores) == len(stores)
        assert sum(line.count("  # kernel ") for line in source.splitlines()) == \
            (0 if name == "python" else sum(s.group.compiled for s in kernels))
    # Each backend replays the next step from the same state as eager code.
    x2 = rng.standard_normal((256, 8)).astype(np.float32)
    want = eager_step(x2, t)
    start = [(n.payload, n.payload.read().copy()) for n in graph.of_kind("state")]
    results = {}
    for name, plan in plans.items():
        for slot, array in start:  # parameters, Adam's moments and step count
            slot.write(array.copy())
        results[name] = (plan(x2, t).data, [p.data.copy() for p in model.params()])
    for name, (loss, params) in results.items():
        np.testing.assert_allclose(loss, want.data, rtol=1e-5, err_msg=name)
        for got, p in zip(params, eager_model.params()):
            np.testing.assert_allclose(got, p.data, rtol=1e-4, atol=1e-6, err_msg=name)


def test_the_interpreter_applies_stores_through_the_one_store_function(monkeypatch):
    step, x, t = linear_regression_step()
    graph = step.lower(x, t)
    applied = []
    original = interpreter.store
    monkeypatch.setattr(interpreter, "store", lambda s, value, leaves: (
        applied.append(str(s)), original(s, value, leaves)))
    graph.interpret(x, t)
    assert applied == ["store b.grad <- j", "store W.grad <- i", "store W <- l",
                       "store b <- n"]


def test_a_freed_value_is_gone_for_the_interpreter():
    step, x, t = linear_regression_step()
    plan = backends.compile(step.lower(x, t), "interpreter")
    plan.execute([x, t])
    assert "c" not in plan.env and "e" in plan.env  # c died after its last reader


@pytest.mark.parametrize("backend", ["interpreter", "python", "cpu"])
def test_a_plan_called_with_an_argument_the_trace_fixed_says_so(backend):
    # A numpy integer scalar is a number to trace mode: part of the signature, fixed
    # in the graph, so the plan takes the arrays alone.
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    traced = dezero.trace(lambda x, n: F.sum(x) * float(n))
    want = traced(x, np.int64(3))
    plan = traced.graph.compile(backend).wait()
    with pytest.raises(TypeError, match=r"takes 1 inputs \(x\), got 2; arguments that "
                                        r"were not arrays .* are fixed in the graph"):
        plan(x, np.int64(3))
    with pytest.raises(TypeError, match="takes 1 inputs"):
        plan()
    assert plan(x).data == want.data == 45.0
