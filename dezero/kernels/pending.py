"""Compiling without waiting: a graph's kernel library builds on a worker thread
while its replays run unfused; the fused plan takes over at the first replay after
the library is ready.

Used by cpu.py when a library is not in the kernel cache yet. One
worker compiles one library at a time (the compiler uses a core of its own), so
many new graphs queue rather than start a compiler each.

    plan = graph.compile("cpu")   # returns at once; plan(x) runs unfused until ready
    plan.wait()                   # blocks until the fused plan runs (tests, benchmarks)
"""
from __future__ import annotations

import os
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

from dezero.static import debugging


def _new_worker():
    global _WORKER
    _WORKER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dezero-compile")


_new_worker()
# A forked child has no worker thread: it gets its own (and builds again what its
# parent had not finished, see Pending._here).
os.register_at_fork(after_in_child=_new_worker)


def workers() -> int:
    """The worker's threads now (none before the first build): they read no arrays."""
    return sum(t.is_alive() for t in _WORKER._threads)


def _drop_queued_builds():
    # At exit the library being compiled is finished (into the cache), and those not
    # begun are left for a later run, rather than the process waiting for each.
    _WORKER.shutdown(wait=False, cancel_futures=True)


# Called before the executor's own exit hook, which joins its thread (reverse order).
threading._register_atexit(_drop_queued_builds)


class Pending:
    """The plan of a graph whose kernels compile in the background.

    unfused     the plan that replays until the library is ready
    build()     runs on the worker: compiles, returns what take_over is given
    take_over   take_over(result) -> the plan to replay from then on, called on the
                replaying thread with a function that returns build's result or
                raises what build raised; what it raises (a compiler error) is
                warned about once, kept in `error`, and the unfused plan runs on

    Other attributes (source, glue, kernel_source, library) are those of the plan
    that runs now.
    """

    def __init__(self, unfused, build, take_over):
        self.current, self.error = unfused, None
        self._take_over, self._lock, self._began = take_over, threading.Lock(), time.perf_counter()
        self._build, self._pid = build, os.getpid()
        self._future = _WORKER.submit(build)

    def __call__(self, *inputs):
        return self._now()(*inputs)  # the plan that runs checks how many inputs came

    def _here(self):
        """The build's future in this process: a child forked before the build
        finished builds again (its parent's worker, and what it does, is not here)."""
        with self._lock:
            if self._future is not None and self._pid != os.getpid():
                self._pid, self._future = os.getpid(), _WORKER.submit(self._build)
            return self._future

    def run(self, leaves):
        return self._now().run(leaves)

    def replay(self, leaves):
        return self._now().replay(leaves)

    def _now(self):
        """The plan to run: the fused one once the build has finished."""
        future = self._future if self._pid == os.getpid() else self._here()
        if future is not None and future.done():
            self._switch()
        return self.current

    @property
    def ready(self) -> bool:
        """Whether the build has finished (the next replay switches plans)."""
        return self._future is None or self._future.done()

    def wait(self, timeout: float | None = None):
        """Block until the build has finished and switch to its plan; return self.
        TimeoutError after `timeout` seconds; the build's error, if it failed."""
        future = self._here()
        if future is not None:
            future.exception(timeout)  # waits; what build raised, take_over sees
        self._switch()
        if self.error is not None:
            raise self.error
        return self

    def _switch(self):
        with self._lock:  # threads replaying at once: one switches, the others wait
            future, self._future = self._future, None
            if future is None:
                return
            try:
                self.current = self._take_over(future.result)
                self.run = self.current.run  # from now on, without asking again
                debugging.log(1, f"kernels of {self.current.graph.name} ready "
                                 f"{time.perf_counter() - self._began:.2f} s after its trace: "
                                 f"replays run them from now")
            except Exception as e:  # noqa: BLE001 - said once; the unfused plan runs on
                self.error = e
                warnings.warn(f"dezero: the kernels of graph {self.current.graph.name} were "
                              f"not built, it replays unfused: {e}", RuntimeWarning,
                              stacklevel=4)

    def __getattr__(self, name):
        if name == "current":  # not set yet: __init__ failed
            raise AttributeError(name)
        return getattr(self.current, name)
