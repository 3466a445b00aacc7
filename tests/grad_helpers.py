"""Helpers shared by the NN and convolution op tests: seeded inputs and gradients
turned into functions that can be checked again (double backprop)."""
import functools

import numpy as np


def rng(seed=0):
    return np.random.RandomState(seed)


@functools.cache
def weights(seed, shape):
    """Fixed random weights (read-only), drawn once: a numerical gradient calls
    the function they weigh thousands of times."""
    w = rng(seed).randn(*shape)
    w.flags.writeable = False
    return w


def gradient_of(f, seed=11):
    """x -> w * d sum(f(x)) / dx, built with create_graph so that it can be differentiated."""
    def g(x):
        y = f(x)
        y.backward(create_graph=True)
        gx = x.grad
        x.cleargrad()
        return gx * weights(seed, x.shape)
    return g
