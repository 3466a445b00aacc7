"""Timing shared by the benchmarks: the best (or the median) time per call of
functions that take turns, so that load from other processes hits them alike.

    from timing import interleaved_best, interleaved_median
    eager_s, replay_s = interleaved_best([eager, replay], seconds=2.0, rounds=10)
    eager_s, replay_s = interleaved_median([eager, replay], seconds=2.0, rounds=10)
"""
import os
import statistics
import time


def interleaved_best(fns, seconds, rounds, clock=time.perf_counter):
    """Best time per call (seconds, by `clock`) of each function: each is first
    called enough times to fill its share of `seconds`, then all take turns for
    `rounds` rounds of that many calls, each round beginning one function later."""
    return [min(times) for times in interleaved_rounds(fns, seconds, rounds, clock)]


def interleaved_median(fns, seconds, rounds, clock=time.perf_counter):
    """Median over the rounds of the time per call of each function (taking turns as
    interleaved_best): on a loaded machine, the typical call rather than the luckiest."""
    return [statistics.median(times) for times in interleaved_rounds(fns, seconds, rounds,
                                                                      clock)]


def interleaved_rounds(fns, seconds, rounds, clock=time.perf_counter):
    """For each function, its time per call (seconds, by `clock`) in each round."""
    counts = []
    for fn in fns:
        fn()
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds / rounds / len(fns):
            fn()
            n += 1
        counts.append(max(n, 1))
    times = [[] for _ in fns]
    for r in range(rounds):
        # Each round starts one function later, so that none always runs right after
        # the same one (what one leaves behind, threads still busy or a cache filled
        # with its own data, slows the next).
        for i in [*range(r % len(fns), len(fns)), *range(r % len(fns))]:
            fn, n = fns[i], counts[i]
            start = clock()
            for _ in range(n):
                fn()
            times[i].append((clock() - start) / n)
    return times


class one_core:
    """`with one_core():` every thread of this process, and every thread started
    meanwhile, runs on one core; on leaving, on all it ran on before. "One thread
    each" then holds for libraries that start a thread pool of their own whatever
    OPENBLAS_NUM_THREADS says (XLA's CPU client uses every core it may run on, which
    made JAX's matrix products run on two cores here), and for dezero's kernels.
    Where the OS cannot pin threads (not Linux), it does nothing."""

    def __enter__(self):
        self.cores = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else None
        self._pin({min(self.cores)} if self.cores else None)
        return self

    def __exit__(self, *exc):
        self._pin(self.cores)

    @staticmethod
    def _pin(cores):
        if cores is None or not os.path.isdir("/proc/self/task"):
            return
        for thread in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(thread), cores)
            except (ProcessLookupError, PermissionError):  # a thread that ended
                pass
