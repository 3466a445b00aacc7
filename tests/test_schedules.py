"""Learning-rate schedules: the rate of each epoch against closed forms, set on
the optimizer, and read by a traced step at every replay without a retrace."""
import math

import numpy as np
import pytest
from train_helpers import training_step

from dezero import optimizers
from dezero.models import MLP
from dezero.schedules import CosineDecay, LinearWarmup, StepDecay


def _rates(schedule, optimizer, name, epochs):
    rates = []
    for _ in range(epochs):
        rates.append(getattr(optimizer, name))
        schedule.step()
    return rates


def test_step_decay():
    optimizer = optimizers.SGD(lr=0.8)
    rates = _rates(StepDecay(optimizer, step_size=2, gamma=0.5), optimizer, "lr", 6)
    assert rates == [0.8, 0.8, 0.4, 0.4, 0.2, 0.2]


def test_cosine_decay_sets_adams_alpha():
    optimizer = optimizers.Adam(alpha=0.1)
    rates = _rates(CosineDecay(optimizer, epochs=4, min_factor=0.1), optimizer, "alpha", 6)
    want = [0.1 * (0.1 + 0.9 * (1 + math.cos(math.pi * e / 4)) / 2) for e in range(5)]
    np.testing.assert_allclose(rates, want + [0.01], rtol=1e-15)


def test_linear_warmup_then_cosine():
    optimizer = optimizers.MomentumSGD(lr=1.0)
    schedule = LinearWarmup(optimizer, 4, then=CosineDecay(optimizer, epochs=2))
    rates = _rates(schedule, optimizer, "lr", 7)
    np.testing.assert_allclose(rates, [0.25, 0.5, 0.75, 1.0, 1.0, 0.5, 0.0], atol=1e-15)


def test_schedules_refuse_what_they_cannot_do():
    with pytest.raises(TypeError, match="AdaDelta has no learning rate"):
        StepDecay(optimizers.AdaDelta(), 2)
    with pytest.raises(ValueError, match="step_size must be a positive int"):
        StepDecay(optimizers.SGD(), 0)
    with pytest.raises(ValueError, match="same optimizer"):
        LinearWarmup(optimizers.SGD(), 2, then=CosineDecay(optimizers.SGD(), 3))


@pytest.mark.parametrize("make", [lambda o: StepDecay(o, 1, gamma=0.5),
                                  lambda o: LinearWarmup(o, 3, then=CosineDecay(o, 3))],
                         ids=["step", "warmup_cosine"])
def test_a_traced_step_follows_the_schedule_without_retracing(make):
    def run(traced):
        np.random.seed(0)
        model = MLP((6, 2))
        optimizer = optimizers.Adam(alpha=0.05).setup(model)
        schedule = make(optimizer)
        step = training_step(model, optimizer, traced)
        x = np.random.RandomState(1).randn(12, 3).astype(np.float32)
        t = (x[:, 0] > 0).astype(np.int64)
        losses = []
        for _ in range(6):
            for _ in range(2):
                losses.append(float(step(x, t).data))
            schedule.step()
        return losses, step

    want, _ = run(traced=False)
    got, step = run(traced=True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert step.entries == 1
