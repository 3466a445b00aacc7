"""Backward over long chains: the time per op should not grow with the depth.

Builds chains of 10^3, 10^4 and 10^5 ops (y = y * 0.5 + 1 on a (10,) float32
array, two ops a step) and times `backward()` alone, several times on the same
graph. A heap ordered by generation keeps each step O(log n) and nothing
recurses, so the cost per op stays flat. Run by hand from the repository root:

    python benchmarks/bench_backward_depth.py [--repeat 5]
"""
import argparse
import os
import sys
import time

import numpy as np

# Run from a checkout: import the dezero beside this folder.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from dezero import Variable  # noqa: E402

# =============================================================================
# Chain, timing and report
# =============================================================================

DEPTHS = (10 ** 3, 10 ** 4, 10 ** 5)


def build_chain(ops):
    x = Variable(np.ones(10, dtype=np.float32))
    y = x
    for _ in range(ops // 2):
        y = y * 0.5 + 1
    return x, y


def backward_seconds(x, y, repeat):
    """Best CPU time of `repeat` backward passes over the same graph."""
    best = float("inf")
    for _ in range(repeat):
        x.cleargrad()
        y.cleargrad()
        start = time.process_time()
        y.backward()
        best = min(best, time.process_time() - start)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}; best of {args.repeat} "
          f"backward passes; us = CPU microseconds per op")
    print(f"{'ops':>8} {'backward ms':>12} {'us/op':>8} {'vs 10^3':>8}")
    first = None
    for ops in DEPTHS:
        x, y = build_chain(ops)
        per_op = backward_seconds(x, y, args.repeat) / ops
        first = first or per_op
        print(f"{ops:>8} {per_op * ops * 1e3:12.1f} {per_op * 1e6:8.2f} {per_op / first:8.2f}")
        del x, y


if __name__ == "__main__":
    main()
