"""What a recording run does besides its Function calls, seen from the outside.

Beside reach.py, used by trace.py around each recording. Watch is the layers'
observer during the run (dezero.layers.set_observer): layers tell it which
attributes they assign (carried state, found wherever the layer lives) and which
gradients they clear, optimizers when they update or get a hyperparameter set.
After the run, escaped() finds Variables it computed that something the survey
did not reach still holds.

    watch = Watch(tracer.computed); layers.set_observer(watch); ...run...; escaped(refs, roots)
"""
from __future__ import annotations

import gc
import sys
import types
import weakref

from dezero.core import Variable
from dezero.errors import TraceError, where

# =============================================================================
# escaped: Variables of the run that something unknown still holds
# =============================================================================


def escaped(refs, roots) -> list:
    """The Variables among refs (weak references to those the run computed) that
    something besides the roots (outputs, gradients, carried and per-update values)
    and the dynamic graph behind them still holds, as (Variable, kinds of holders):
    something the survey did not find keeps them for a later call."""
    alive = [v for v in (ref() for ref in refs) if v is not None]
    if not alive:
        return []
    graph = _Graph(roots)
    # Reference counts sort out the few suspects cheaply: a Variable held only by
    # the graph has one reference per Function input list and per .grad naming it.
    # The first, a fresh Variable held by nothing else, counts the loop's own.
    alive.insert(0, Variable(None))
    baseline, suspects = 0, []
    for i, var in enumerate(alive):
        count = sys.getrefcount(var)
        if i == 0:
            baseline = count
        elif id(var) not in graph.roots and (id(var) not in graph.reached or
                                             count - baseline > graph.held.get(id(var), 0)):
            suspects.append(weakref.ref(var))
    del alive, var
    if not suspects:
        return []
    # A reference cycle (a caught exception's frame) may hold some. The run's own
    # cycles are young: collecting the young generations is cheap, a full
    # collection of a large heap is not (0.2 s), so it runs only if needed.
    for generation in (1, 2):
        gc.collect(generation)
        left = [(v, graph.unexplained(v)) for v in (ref() for ref in suspects)
                if v is not None]
        left = [(v, kinds) for v, kinds in left if kinds]
        if not left:
            break
    return left


class _Graph:
    """The Variables reachable from roots through gradients and creators, and how
    many references the graph itself holds to each."""

    def __init__(self, roots):
        stack = list(flat(roots))
        self.roots = {id(v) for v in stack if isinstance(v, Variable)}
        self.reached, self.held, self.lists, creators = set(), {}, set(), set()
        while stack:
            var = stack.pop()
            if not isinstance(var, Variable) or id(var) in self.reached:
                continue
            self.reached.add(id(var))
            if var.grad is not None:
                self.held[id(var.grad)] = self.held.get(id(var.grad), 0) + 1
                stack.append(var.grad)
            creator = var.creator
            if creator is not None and id(creator) not in creators:
                creators.add(id(creator))
                inputs = getattr(creator, "inputs", ())
                self.lists.add(id(inputs))
                for x in inputs:
                    self.held[id(x)] = self.held.get(id(x), 0) + 1
                stack += inputs
                stack += [ref() for ref in getattr(creator, "outputs", ())]

    def unexplained(self, var) -> list[str]:
        """The kinds of what refers to var besides the graph (and frames)."""
        kinds = set()
        # A loop, not a comprehension: one would hold var in a cell of its own.
        for holder in gc.get_referrers(var):
            if isinstance(holder, (types.FrameType, Variable)) or id(holder) in self.lists:
                continue
            if type(holder) is tuple and len(holder) == 1 and holder[0] is var:
                continue  # the call's arguments
            kinds.add(type(holder).__name__)
        return sorted(kinds)


def flat(roots):
    """What the roots hold, tuples, lists and dicts opened, in order."""
    for root in roots:
        if isinstance(root, (tuple, list)):
            yield from flat(root)
        elif isinstance(root, dict):
            yield from flat(list(root.values()))
        else:
            yield root


# =============================================================================
# Watch: what the run does to layers (dezero.layers.set_observer)
# =============================================================================


class Watch:
    """What a recording run does to layers, told through dezero.layers.observer()."""

    def __init__(self, computed):
        self.computed = computed       # computed(v): whether the run made Variable v
        self.attributes = {}           # (id(holder), name) -> (holder, name)
        self.before = {}               # (id(holder), name) -> (holder, name, old value)
        self.fresh_grads = set()       # ids of Variables whose old .grad was dropped unread
        self.clears = {}               # id -> (Variable, its .grad) of those the run cleared
        self.numbers = {}              # (id(holder), name) -> (holder, Hyperparameter) read
        self.updated = False
        self.did_initialise = False     # a layer or optimizer initialised state in the run

    def assigned(self, holder, name, value):
        self.attributes[(id(holder), name)] = (holder, name)
        self.before.setdefault((id(holder), name), (holder, name, holder.__dict__.get(name)))

    def cleared(self, params):
        for param in params:
            self.clears.setdefault(id(param), (param, param.grad))
        # An old gradient cleared before any update() and before backward() added to
        # it was never read: the graph does not depend on whether it was set.
        if self.updated:
            return
        for param in params:
            if param.grad is None or not self.computed(param.grad):
                self.fresh_grads.add(id(param))

    def updating(self):
        self.updated = True

    def initialised(self):
        self.did_initialise = True

    def hyperparameter_set(self, optimizer, name):
        raise TraceError(
            f"{type(optimizer).__name__}.{name} is set inside a traced function ({where()}); "
            f"a replay runs no Python assignments, so the value passed in would be "
            f"ignored by every replay\n  fix: set it outside the traced function, before "
            f"the call (every replay reads it afresh): optimizer.{name} = value; step(x, t)")

    def hyperparameter_read(self, holder, hyperparameter):
        # opt.lr as a Python number (return loss, opt.lr; p.data -= opt.lr * ...; if
        # opt.lr < 0.07:): the graph keeps the value read, so a new one must retrace.
        self.numbers[(id(holder), hyperparameter.name)] = (holder, hyperparameter)

    def carried(self, found) -> list:
        """(holder, name, Variable) for layer attributes the run left holding a Variable
        it computed, that the walk from the function did not reach."""
        known = {(id(h), n) for h, n, _ in found}
        carried = []
        for key, (holder, name) in self.attributes.items():
            value = holder.__dict__.get(name)
            if key not in known and isinstance(value, Variable) and self.computed(value):
                carried.append((holder, name, value))
        return carried
