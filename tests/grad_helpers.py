"""Helpers shared by the NN and convolution op tests: seeded inputs and gradients
turned into functions that can be checked again (double backprop)."""
import numpy as np


def rng(seed=0):
    return np.random.RandomState(seed)


def gradient_of(f, seed=11):
    """x -> w * d sum(f(x)) / dx, built with create_graph so that it can be differentiated."""
    def g(x):
        y = f(x)
        y.backward(create_graph=True)
        gx = x.grad
        x.cleargrad()
        return gx * rng(seed).randn(*x.shape)
    return g
