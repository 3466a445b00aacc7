"""Reductions in traced graphs: softmax_cross_entropy hands its probabilities to its
backward (the graph computes softmax once)."""
import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable, models, optimizers
from dezero.utils import numerical_grad

# =============================================================================
# softmax_cross_entropy: one softmax, forward and backward
# =============================================================================


def sce_step(model, optimizer):
    optimizer.setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def batch(n=8, dim=4, classes=3, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, dim)).astype(dtype), rng.integers(0, classes, n)


def test_the_traced_loss_and_gradient_compute_softmax_once():
    model = models.MLP((5, 3))
    traced = dezero.trace(sce_step(model, optimizers.SGD(0.1)))
    x, t = batch()
    traced(x, t)
    graph = traced.graph
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    assert "softmax" not in ops and ops.count("softmax_cross_entropy") == 1
    node, = (n for n in graph.nodes if n.op == "softmax_cross_entropy")
    loss, probs = node.outputs
    assert (loss.shape, probs.shape) == ((), (8, 3))
    # the gradient (probs - one_hot(t)) / N reads the forward's probabilities
    readers = [n.op for n in graph.nodes if probs in n.inputs]
    assert readers == ["sub"]


def test_the_probabilities_are_softmax_bit_for_bit():
    x, t = batch(dtype=np.float64)
    _, probs = F.SoftmaxCrossEntropy()(x * 3, t)
    np.testing.assert_array_equal(probs.data, F.softmax(x * 3).data)


def test_traced_double_backward_through_the_probabilities_matches_eager():
    # d/dx sum(w * d loss/dx): the gradient's own gradient flows into the probabilities
    x0, t = batch(n=5, dim=3, dtype=np.float64, seed=1)
    w = np.random.default_rng(2).standard_normal(x0.shape)

    def second(x, t):
        loss = F.softmax_cross_entropy(x, t)
        loss.backward(create_graph=True)
        gx = x.grad
        x.cleargrad()
        F.sum(gx * w).backward()
        return x.grad

    def eager(x_array):
        x = Variable(x_array)
        return second(x, t).data

    traced = dezero.trace(second)
    traced(Variable(x0), t)  # recorded
    replayed = traced(Variable(x0), t).data
    np.testing.assert_allclose(replayed, eager(x0), rtol=1e-12, atol=1e-15)
    # and against a numerical derivative of the first gradient
    def first(x_array):
        x = Variable(x_array)
        F.softmax_cross_entropy(x, t).backward()
        return np.sum(x.grad.data * w)
    np.testing.assert_allclose(replayed, numerical_grad(first, x0.copy()), rtol=1e-5,
                               atol=1e-7)
