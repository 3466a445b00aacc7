"""Learning-rate schedules: small objects that set an optimizer's rate each epoch.

A schedule reads the optimizer's rate when it is made (lr, or alpha for Adam and
AdamW) as the base rate, sets the rate of epoch 0 at once, and the rate of the
next epoch at each step(). The rate is a hyperparameter, a Variable that a traced
training step reads at every replay: changing it never retraces (unless the step
reads optimizer.lr as a Python number itself: then each new rate records anew).

    schedule = schedules.CosineDecay(optimizer, epochs=100)
    for epoch in range(100): ...train one epoch...; schedule.step()
"""
import math

import numpy as np


class Schedule:
    """The shared part: the optimizer, its base rate and the epoch count.
    A subclass says, in factor(epoch), what the base rate is multiplied by."""

    def __init__(self, optimizer):
        self.optimizer = optimizer
        self.name = _rate_name(optimizer, type(self).__name__)
        self.base = getattr(optimizer, self.name)
        self.epoch = 0
        self._apply()

    def factor(self, epoch):
        raise NotImplementedError(f"{type(self).__name__}.factor is not defined")

    def rate(self, epoch=None):
        """The rate of `epoch` (by default the current one)."""
        return self.base * self.factor(self.epoch if epoch is None else epoch)

    def step(self):
        """Move to the next epoch and set its rate on the optimizer."""
        self.epoch += 1
        self._apply()

    def _apply(self):
        setattr(self.optimizer, self.name, self.rate())

    def state_dict(self):
        return {"epoch": np.array(self.epoch), "base": np.array(self.base, dtype=np.float64)}

    def load_state_dict(self, state):
        self.epoch, self.base = int(state["epoch"]), float(state["base"])
        self._apply()

    def __repr__(self):
        return (f"{type(self).__name__}(epoch {self.epoch}: {self.name} = "
                f"{self.rate():.6g}, base {self.base:.6g})")


def _rate_name(optimizer, caller):
    # (asked of the optimizer, not its class: dist.ShardedOptimizer has its optimizer's)
    if hasattr(optimizer, "alpha"):  # Adam, AdamW: their lr is derived from alpha
        return "alpha"
    if hasattr(optimizer, "lr"):  # SGD, MomentumSGD, AdaGrad
        return "lr"
    raise TypeError(f"{caller}: {type(optimizer).__name__} has no learning rate (lr or "
                    f"alpha) to schedule")


def _check_positive_int(caller, name, value):
    if not (isinstance(value, int | np.integer) and value > 0):
        raise ValueError(f"{caller}: {name} must be a positive int, got {value!r}")


class StepDecay(Schedule):
    """The base rate times gamma ** (epoch // step_size): the rate is multiplied
    by gamma every step_size epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1):
        _check_positive_int("StepDecay", "step_size", step_size)
        self.step_size, self.gamma = step_size, float(gamma)
        super().__init__(optimizer)

    def factor(self, epoch):
        return self.gamma ** (epoch // self.step_size)


class CosineDecay(Schedule):
    """From the base rate down to base * min_factor along half a cosine over
    `epochs` epochs; min_factor after that."""

    def __init__(self, optimizer, epochs, min_factor=0.0):
        _check_positive_int("CosineDecay", "epochs", epochs)
        self.epochs, self.min_factor = epochs, float(min_factor)
        super().__init__(optimizer)

    def factor(self, epoch):
        progress = min(epoch, self.epochs) / self.epochs
        return self.min_factor + (1 - self.min_factor) * (1 + math.cos(math.pi * progress)) / 2


class LinearWarmup(Schedule):
    """The rate grows linearly over the first `warmup` epochs, (epoch + 1) / warmup
    of the base rate, then follows `then` (another schedule of the same optimizer,
    started when the warmup ends) or stays at the base rate.

        LinearWarmup(optimizer, 5, then=CosineDecay(optimizer, epochs=95))
    """

    def __init__(self, optimizer, warmup, then=None):
        _check_positive_int("LinearWarmup", "warmup", warmup)
        if then is not None and then.optimizer is not optimizer:
            raise ValueError("LinearWarmup: `then` must schedule the same optimizer")
        self.warmup, self.then = warmup, then
        super().__init__(optimizer)

    def factor(self, epoch):
        if epoch < self.warmup:
            return (epoch + 1) / self.warmup
        return 1.0 if self.then is None else self.then.factor(epoch - self.warmup)
