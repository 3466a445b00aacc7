"""trace(check=True): replay a graph right after recording it and compare with eager.

Beside trace.py, which calls check_replay after each recording that is kept. State
is put back in between, so the replay starts where the eager run started; on a
difference, the recorded graph is interpreted node by node against the values the
eager run computed, and the error names the first node that differs and the line
of the user's code that made it. The replay runs the optimised graph unfused (the
python backend, each op's own forward, as eager runs it): check looks for what a
recording cannot see, not for rounding. Fused kernels round a few ulp apart from
numpy, and a step can magnify that without bound (Adam divides a gradient that is
rounding noise by its own size), so no fixed tolerance would tell them from a
fault; the kernels are tested against the interpreter op by op instead.

    check_replay(name, tracer, recorded, entry, leaves, result, random_state, ...)
"""
from __future__ import annotations

import linecache
import os

import numpy as np

from dezero import cuda
from dezero.core import Variable
from dezero.errors import TraceError
from dezero.static import debugging
from dezero.static.backends import pycode
from dezero.static.backends.interpreter import Interpreter
from dezero.static.ir import format_node, type_str
from dezero.static.watch import flat


def check_replay(name, tracer, recorded, entry, leaves, result, random_state,
                 attrs_before, attr_writes):
    """Replay entry's graph once, unfused, with the state and random state of before
    the run, compare outputs, state and carried attributes with the eager run, and
    leave the eager run's state behind. Raises TraceError on a difference."""
    before = tracer.state_before()
    eager_state = [(var, var._data, var.grad) for var, _, _ in before]
    eager_attrs = [(h, n, getattr(h, n, None)) for h, n, _ in attrs_before + attr_writes]
    # Carried state is compared through its attribute, which eager code may have
    # updated in place (self.s.data += x) where a replay gives it a new Variable.
    carried = [(c.node.payload, c.node.payload.read(), c.node.outputs[0].name)
               for c in tracer.captures if c.node.attrs["field"] == "attr"]
    eager_random = np.random.get_state()
    put_back(before, attrs_before, random_state)
    try:
        replayed = pycode.compile_graph(entry.graph).run(leaves)
        pairs = list(zip(_arrays(result, leaves), _arrays(replayed, leaves),
                         (f"output {v.name}" for v in entry.graph.output_values)))
        pairs += [(data, slot.read(), f"state {name}") for slot, data, name in carried]
        for (var, data, grad), (node, with_grad) in zip(eager_state, tracer.state_names()):
            if not with_grad:
                continue  # carried state: compared above
            pairs.append((data, var._data, f"state {node}"))
            if grad is not None or var.grad is not None:  # one None: a difference
                pairs.append((getattr(grad, "_data", None), getattr(var.grad, "_data", None),
                              f"state {node}.grad"))
        for holder, attr, var in attr_writes:
            pairs.append((var._data, getattr(holder, attr).data,
                          f"attribute {type(holder).__name__}.{attr}"))
        for eager, replay, what in pairs:
            problem = _difference(eager, replay)
            if problem:
                first = first_difference(tracer, recorded, leaves, random_state)
                raise TraceError(
                    f"check failed for {name}: {what} differs between the replay and the "
                    f"eager run ({problem})" + (f"\n  first differing node: {first}"
                                                if first else "") +
                    "\n  an op may keep hidden state, read a global, or compute with raw "
                    "numpy outside dezero functions")
    finally:
        put_back(eager_state, eager_attrs, eager_random)
    debugging.log(3, f"check {name}: replay equals the eager run")


def first_difference(tracer, recorded, leaves, random_state) -> str:
    """'b: f32[2] = counting(x), made at step.py:12, `y = g(x)`' for the first op of
    the recorded graph whose result differs from the eager run's, or ''."""
    eager = {}
    for known in tracer.known.values():
        if known.computed and known.value is not None and known.var._data is not None:
            eager[id(known.value)] = known.var._data
    comparing = _Comparing(recorded, eager)
    state = np.random.get_state()
    np.random.set_state(random_state)
    try:
        comparing.execute(leaves, [c.before_data for c in tracer.captures])
    except Exception:  # noqa: BLE001 - a graph the interpreter cannot run: no detail
        pass
    finally:
        np.random.set_state(state)
    if comparing.first is None:
        return ""
    node, problem = comparing.first
    made = f", made at {source_text(node.source)}" if node.source is not None else ""
    return f"{format_node(node)}{made} ({problem})"


def source_text(source) -> str:
    """'step.py:12, `y = f(x)`' for a node's (filename, line)."""
    filename, line = source
    text = linecache.getline(filename, line).strip()
    return f"{os.path.basename(filename)}:{line}" + (f", `{text}`" if text else "")


class _Comparing(Interpreter):
    """The reference interpreter, noting the first op whose result is not eager's."""

    def __init__(self, graph, eager):
        super().__init__(graph)
        self.eager, self.first = eager, None

    def node(self, step):
        super().node(step)
        for value in step.node.outputs:
            expected = self.eager.get(id(value))
            if self.first is None and expected is not None:
                problem = _difference(expected, self.env[value.name])
                if problem:
                    self.first = (step.node, problem)

    def store(self, step):
        pass  # only compares: the state stays as the eager run left it


def put_back(state, attributes, random_state):
    """Captured state (tracer.state_before()), attributes ((holder, name, value)) and
    numpy's random state as they were."""
    for var, data, grad in state:  # without telling any tracer
        var._data, var.grad = data, grad
    for holder, name, value in attributes:
        setattr(holder, name, value)
    np.random.set_state(random_state)


def _arrays(result, leaves):
    """The arrays a function returned (a Variable's .data), in order, but for the
    arguments it returned as they were (no output of the graph)."""
    return [getattr(x, "_data", x) for x in flat([result]) if isinstance(
        x, (Variable, *cuda.array_types)) and not any(x is leaf for leaf in leaves)]


def _difference(eager, replay) -> str:
    if eager is None or replay is None:
        return f"eager {eager is not None and 'set' or None}, replay " \
               f"{replay is not None and 'set' or None}"
    eager, replay = cuda.as_numpy(eager), cuda.as_numpy(replay)
    if eager.shape != replay.shape or eager.dtype != replay.dtype:
        return f"eager {type_str(eager.shape, eager.dtype)}, replay " \
               f"{type_str(replay.shape, replay.dtype)}"
    if eager.dtype.kind in "fc":
        close = np.allclose(eager, replay, rtol=1e-5, atol=1e-6, equal_nan=True)
    else:
        close = np.array_equal(eager, replay)
    if close:
        return ""
    diff = np.max(np.abs(eager.astype(np.float64) - replay.astype(np.float64)))
    return f"max abs difference {diff:.3g}"


