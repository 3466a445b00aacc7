"""Step 73: layer norm and GELU written as Functions, their gradients checked.

A transformer block uses two functions the earlier steps did not have. Layer
normalisation rescales each position's vector to mean 0 and variance 1 over its
features, then by a learned gamma and beta: y = (x - mean) / sqrt(var + eps) *
gamma + beta. Unlike batch normalisation it looks at one example at a time, so it
works the same in training and in testing, for any batch size. GELU is the
smooth ReLU of GPT-2: x * Phi(x), Phi the normal distribution's function, here in
GPT-2's tanh approximation. Each is written as one Function with its forward on
arrays and its backward by hand, then checked three ways: against
F.layer_norm and F.gelu (dezero composes them of smaller ops, whose backward comes
for free), against a numerical gradient (gradient_check, as in step 10), and, for
GELU, a second derivative through the backward itself. The backward is written
with Functions and recomputes what it needs from the inputs: a Function keeps
nothing of its forward on self (a traced step would freeze it).
Run: python steps/step73.py
"""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero.functions as F
from dezero import Function, Variable
from dezero.utils import gradient_check, numerical_grad


class LayerNorm(Function):
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis of x."""

    def __init__(self, eps=1e-5):
        self.eps = eps

    def forward(self, x, gamma, beta):
        xc = x - x.mean(axis=-1, keepdims=True)
        var = (xc * xc).mean(axis=-1, keepdims=True)    # biased, as PyTorch's
        return xc / np.sqrt(var + self.eps) * gamma + beta

    def backward(self, gy):
        x, gamma, _ = self.inputs
        d = x.shape[-1]

        def mean(v):
            return F.sum(v, axis=-1, keepdims=True) / d

        xc = x - mean(x)
        rstd = (mean(xc * xc) + self.eps) ** -0.5
        xhat = xc * rstd                     # the normalised x
        g = gy * gamma                       # the gradient that reaches xhat
        # xhat moves with x directly (rstd g), through the mean (every entry's
        # share of mean(g)) and through the variance (along xhat itself):
        gx = rstd * (g - mean(g) - xhat * mean(g * xhat))
        rows = tuple(range(x.ndim - 1))      # gamma and beta: summed over positions
        return gx, F.sum(gy * xhat, axis=rows), F.sum(gy, axis=rows)


def layer_norm(x, gamma, beta, eps=1e-5):
    return LayerNorm(eps)(x, gamma, beta)


C = math.sqrt(2 / math.pi)


class GELU(Function):
    """0.5 x (1 + tanh(u)), u = sqrt(2 / pi) (x + 0.044715 x^3): GPT-2's GELU."""

    def forward(self, x):
        return 0.5 * x * (1 + np.tanh(C * (x + 0.044715 * x ** 3)))

    def backward(self, gy):
        x, = self.inputs
        t = F.tanh(C * (x + 0.044715 * x ** 3))
        du = C * (1 + 3 * 0.044715 * x ** 2)             # du/dx
        return gy * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du)


def gelu(x):
    return GELU()(x)


# =============================================================================
# Layer norm: the values, then the gradients of x, gamma and beta
# =============================================================================
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 8)) * 3 + 5          # 2 sequences, 3 positions, 8 features
gamma, beta = rng.standard_normal(8), rng.standard_normal(8)
y = layer_norm(x, np.ones(8), np.zeros(8))
print(f"each position normalised: mean {np.abs(y.data.mean(-1)).max():.1e} at most, "
      f"variance {y.data.var(-1).min():.4f} to {y.data.var(-1).max():.4f}")
mine, library = layer_norm(x, gamma, beta), F.layer_norm(x, gamma, beta)
print(f"layer_norm equals F.layer_norm: {np.allclose(mine.data, library.data)}")

# The outputs of one position sum to sum(beta) whatever x is (the normalised values
# sum to 0), so the gradient of a plain sum would check little: weight them.
w = rng.standard_normal((2, 3, 8))
checks = {"x": gradient_check(lambda v: layer_norm(v, gamma, beta) * w, x),
          "gamma": gradient_check(lambda v: layer_norm(x, v, beta) * w, gamma),
          "beta": gradient_check(lambda v: layer_norm(x, gamma, v) * w, beta)}
print("gradient_check of layer_norm:  " + ", ".join(f"{k} {ok}" for k, ok in checks.items()))

ours = [Variable(a) for a in (x, gamma, beta)]
theirs = [Variable(a) for a in (x, gamma, beta)]
F.sum(layer_norm(*ours) * w).backward()
F.sum(F.layer_norm(*theirs) * w).backward()
print("the same gradients as F.layer_norm: " + str(all(
    np.allclose(a.grad.data, b.grad.data) for a, b in zip(ours, theirs))))


# =============================================================================
# GELU: the values, the gradient, and the second derivative
# =============================================================================
x = np.linspace(-4, 4, 81)
print(f"gelu equals F.gelu(x, approximate='tanh'): "
      f"{np.allclose(gelu(x).data, F.gelu(x, approximate='tanh').data)}; it differs "
      f"from the exact (erf) form by {np.abs(gelu(x).data - F.gelu(x).data).max():.5f} "
      f"at most on [-4, 4]")
print(f"gradient_check of gelu: {gradient_check(gelu, x)}")

v = Variable(x)
y = gelu(v)
y.backward(create_graph=True)          # the backward's own graph: differentiable again
first = v.grad
v.cleargrad()
first.backward()


def gelu_prime(x):
    v = Variable(x)
    gelu(v).backward()
    return v.grad


second = numerical_grad(gelu_prime, x)
print(f"second derivative by backprop equals the numerical one: "
      f"{np.allclose(v.grad.data, second, atol=1e-6)}")

plt = pyplot()
if plt is not None:
    plt.figure(figsize=(6, 4))
    plt.plot(x, np.maximum(x, 0), ":", color="gray", label="ReLU")
    plt.plot(x, y.data, label="GELU")
    plt.plot(x, first.data, label="GELU' (backward)")
    plt.plot(x, v.grad.data, label="GELU'' (backward of backward)")
    plt.legend()
    plt.grid(alpha=0.3)
    plt.savefig("gelu.png")
    print("plot saved to gelu.png")
