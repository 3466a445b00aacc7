"""One training epoch of two MLPs: dezero against numpy by hand and PyTorch eager.

spiral: 2-10-3 sigmoid MLP, softmax cross entropy, SGD, 300 points, batch 30
large:  784-1000-10 sigmoid MLP on 1000 random float32 samples, batch 100
Each epoch is timed several times and the best time is kept; ratios are measured
in the same run. Run by hand: python benchmarks/bench_mlp.py [--repeat N]

Results on a shared, loaded 2-core CPU (numpy 2.4 with OpenBLAS, torch 2.13 CPU,
float32 everywhere); the load moves them by +-20%:
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_mlp.py --repeat 20
    spiral 2-10-3   dezero 2.3 ms  numpy 0.62 ms  torch 6.5 ms  dezero/torch 0.35x
    mlp 784-1000-10 dezero 52 ms   numpy 47 ms    torch 53 ms   dezero/numpy 1.10x
The large MLP is dominated by its matmuls; backward skips the gradient of the raw
input batch (a Constant), as numpy by hand and torch do. The spiral's time is the
per-Function overhead of about 30 small Functions per iteration (8 of them in
SGD's update), most of it in Function.__call__ and Variable.backward.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import optimizers  # noqa: E402
from dezero.models import MLP  # noqa: E402

# =============================================================================
# Problems: spiral, large
# =============================================================================


def spiral_problem():
    x, t = dezero.datasets.get_spiral(train=True)
    return dict(name="spiral 2-10-3", x=x, t=t, sizes=(2, 10, 3), batch=30, lr=1.0)


def large_problem():
    rng = np.random.RandomState(0)
    x = rng.rand(1000, 784).astype(np.float32)
    t = rng.randint(0, 10, size=1000)
    return dict(name="mlp 784-1000-10", x=x, t=t, sizes=(784, 1000, 10), batch=100, lr=0.1)


def initial_weights(sizes):
    rng = np.random.RandomState(1)
    return [((rng.randn(i, o) * np.sqrt(1 / i)).astype(np.float32), np.zeros(o, np.float32))
            for i, o in zip(sizes[:-1], sizes[1:])]


def batches(n, batch):
    order = np.random.RandomState(2).permutation(n)
    return [order[i:i + batch] for i in range(0, n, batch)]


# =============================================================================
# Implementations: dezero, numpy by hand, PyTorch eager
# =============================================================================


def dezero_epoch(problem):
    model = MLP(problem["sizes"][1:])
    for layer, (W, b) in zip(model.layers, initial_weights(problem["sizes"])):
        layer.W.data, layer.b.data = W.copy(), b.copy()
    optimizer = optimizers.SGD(lr=problem["lr"]).setup(model)
    x, t = problem["x"], problem["t"]

    def epoch():
        for index in batches(len(x), problem["batch"]):
            loss = F.softmax_cross_entropy(model(x[index]), t[index])
            model.cleargrads()
            loss.backward()
            optimizer.update()
        return float(loss.data)
    return epoch


def numpy_epoch(problem):
    (W1, b1), (W2, b2) = [(W.copy(), b.copy()) for W, b in initial_weights(problem["sizes"])]
    x, t = problem["x"], problem["t"]
    lr = np.float32(problem["lr"])

    def epoch():
        nonlocal W1, b1, W2, b2
        for index in batches(len(x), problem["batch"]):
            xb, tb = x[index], t[index]
            n = len(xb)
            h = 1 / (1 + np.exp(-(xb @ W1 + b1)))
            y = h @ W2 + b2
            y = y - y.max(axis=1, keepdims=True)
            e = np.exp(y)
            p = e / e.sum(axis=1, keepdims=True)
            loss = -np.log(p[np.arange(n), tb]).mean()
            gy = p
            gy[np.arange(n), tb] -= 1
            gy *= np.float32(1 / n)
            gW2, gb2 = h.T @ gy, gy.sum(axis=0)
            gh = (gy @ W2.T) * h * (1 - h)
            gW1, gb1 = xb.T @ gh, gh.sum(axis=0)
            W1, b1 = W1 - lr * gW1, b1 - lr * gb1
            W2, b2 = W2 - lr * gW2, b2 - lr * gb2
        return float(loss)
    return epoch


def torch_epoch(problem):
    import torch
    layers = []
    for W, b in initial_weights(problem["sizes"]):
        fc = torch.nn.Linear(*W.shape)
        with torch.no_grad():
            fc.weight.copy_(torch.from_numpy(W.T.copy()))
            fc.bias.copy_(torch.from_numpy(b))
        layers.append(fc)
    model = torch.nn.Sequential(layers[0], torch.nn.Sigmoid(), layers[1])
    optimizer = torch.optim.SGD(model.parameters(), lr=problem["lr"])
    x, t = torch.from_numpy(problem["x"]), torch.from_numpy(problem["t"])

    def epoch():
        for index in batches(len(x), problem["batch"]):
            index = torch.from_numpy(index)
            loss = torch.nn.functional.cross_entropy(model(x[index]), t[index])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        return loss.item()
    return epoch


# =============================================================================
# Timing and report
# =============================================================================


def best_times(epochs, repeat):
    """The best time of each epoch function; they run in turns, so that a
    change in the machine's load hits them all alike."""
    for epoch in epochs.values():
        epoch()  # warm up (lazy initialisation, caches)
    times = {name: float("inf") for name in epochs}
    for _ in range(repeat):
        for name, epoch in epochs.items():
            start = time.perf_counter()
            epoch()
            times[name] = min(times[name], time.perf_counter() - start)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
        print("PyTorch is not installed: its column is skipped")
    for problem in (spiral_problem(), large_problem()):
        epochs = {"dezero": dezero_epoch(problem), "numpy": numpy_epoch(problem)}
        if have_torch:
            epochs["torch"] = torch_epoch(problem)
        times = best_times(epochs, args.repeat)
        line = "  ".join(f"{k} {v * 1e3:7.3f} ms" for k, v in times.items())
        ratios = f"dezero/numpy {times['dezero'] / times['numpy']:.2f}x"
        if have_torch:
            ratios += f"  dezero/torch {times['dezero'] / times['torch']:.2f}x"
        print(f"{problem['name']:16s} epoch: {line}  |  {ratios}")


if __name__ == "__main__":
    main()
