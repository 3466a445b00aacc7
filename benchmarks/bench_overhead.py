"""Per-op overhead of eager dezero on tiny arrays, against plain numpy and PyTorch eager.

Measures, in one process: a 100-op chain (50 times y = y * 2 + 1) forward only and
forward + backward, and forward + backward of the 11-op expression
sum(tanh(x * a + b) * (1 / (1 + exp(-x))) + x ** 2) on (10,) float32 arrays.
Run by hand from the repository root (PyTorch is optional):

    python benchmarks/bench_overhead.py [--repeat 15]
"""
import argparse
import os
import sys
import time
import timeit

import numpy as np

# Run from a checkout: import the dezero beside this folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dezero.functions as F  # noqa: E402
from dezero import Variable  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

# =============================================================================
# The workloads: chain and expression, in dezero, numpy and torch
# =============================================================================

CHAIN_STEPS = 50  # each step is two ops: a multiplication and an addition
CHAIN_OPS = 2 * CHAIN_STEPS
EXPR_OPS = 11


def dezero_chain(x0, backward):
    x = Variable(x0)
    y = x
    for _ in range(CHAIN_STEPS):
        y = y * 2 + 1
    if backward:
        y.backward()
    return y


def numpy_chain(x0, backward):
    y = x0
    for _ in range(CHAIN_STEPS):
        y = y * np.float32(2) + np.float32(1)
    if backward:  # by hand: each step multiplies the gradient by 2
        g = np.ones_like(x0)
        for _ in range(CHAIN_STEPS):
            g = g * np.float32(2)
    return y


def torch_chain(x0, backward):
    x = torch.from_numpy(x0).requires_grad_()
    y = x
    for _ in range(CHAIN_STEPS):
        y = y * 2 + 1
    if backward:
        y.backward(torch.ones_like(y))
    return y


def dezero_expr(x0, a0, b0):
    x, a, b = Variable(x0), Variable(a0), Variable(b0)
    y = F.sum(F.tanh(x * a + b) * (1 / (1 + F.exp(-x))) + x ** 2)
    y.backward()
    return x.grad, a.grad, b.grad


def numpy_expr(x, a, b):
    one = np.float32(1)
    t = np.tanh(x * a + b)
    s = one / (one + np.exp(-x))
    y = np.sum(t * s + x ** 2)
    # by hand: d/dx, d/da, d/db of the expression
    gt = s * (one - t * t)
    gx = gt * a + t * s * (one - s) + np.float32(2) * x
    return y, gx, gt * x, gt


def torch_expr(x0, a0, b0):
    x, a, b = (torch.from_numpy(v).requires_grad_() for v in (x0, a0, b0))
    y = torch.sum(torch.tanh(x * a + b) * (1 / (1 + torch.exp(-x))) + x ** 2)
    y.backward()
    return x.grad, a.grad, b.grad


# =============================================================================
# Timing and report
# =============================================================================


# CPU time of this process: on a shared, busy machine it is steadier than wall time,
# and every implementation measured here runs on one thread.
CLOCK = time.process_time


def best_times(fns, repeat, number):
    """Seconds per call of each fn: the best of `repeat` rounds of `number` calls.

    The rounds take turns between the implementations, so that a slow spell of a
    busy machine hits all of them alike and the ratios stay meaningful.
    """
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timeit.timeit(fn, number=number, timer=CLOCK) / number)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x0, a0, b0 = (rng.standard_normal(10).astype(np.float32) for _ in range(3))

    # The implementations must agree before they are timed.
    np.testing.assert_allclose(dezero_chain(x0, False).data, numpy_chain(x0, False), rtol=1e-5)
    gx = dezero_expr(x0, a0, b0)[0].data
    np.testing.assert_allclose(gx, numpy_expr(x0, a0, b0)[1], rtol=1e-4, atol=1e-6)
    if torch is not None:
        torch.set_num_threads(1)  # tiny arrays: no thread pool, less noise
        np.testing.assert_allclose(gx, torch_expr(x0, a0, b0)[0].numpy(), rtol=1e-5)

    cases = {
        f"chain fwd ({CHAIN_OPS} ops)": (CHAIN_OPS, dezero_chain, numpy_chain, torch_chain,
                                         (x0, False)),
        f"chain fwd+bwd ({CHAIN_OPS} ops)": (CHAIN_OPS, dezero_chain, numpy_chain,
                                             torch_chain, (x0, True)),
        f"expr fwd+bwd ({EXPR_OPS} ops)": (EXPR_OPS, dezero_expr, numpy_expr, torch_expr,
                                           (x0, a0, b0)),
    }
    print(f"numpy {np.__version__}, torch {torch.__version__ if torch else 'absent'}; "
          f"best of {args.repeat} rounds; us = CPU microseconds per op")
    print(f"{'case':26} {'dezero us':>10} {'numpy us':>9} {'torch us':>9} "
          f"{'dz/np':>6} {'dz/torch':>9}")
    for name, (ops, *impls, fargs) in cases.items():
        if torch is None:
            impls = impls[:2]
        number = 200 if ops == EXPR_OPS else 40
        times = best_times([lambda f=f, a=fargs: f(*a) for f in impls], args.repeat, number)
        t_dz, t_np, *t_t = [t / ops * 1e6 for t in times]
        torch_cols = f"{t_t[0]:9.2f} {t_dz / t_np:6.1f} {t_dz / t_t[0]:9.2f}" if t_t \
            else f"{'-':>9} {t_dz / t_np:6.1f} {'-':>9}"
        print(f"{name:26} {t_dz:10.2f} {t_np:9.2f} {torch_cols}")


if __name__ == "__main__":
    main()
