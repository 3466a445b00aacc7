"""trace() and TracedFunction: record once per signature, then replay.

The entry point of static/ (re-exported as dezero.trace). A TracedFunction keys
its cache on the signature of a call; a miss records one eager run (tracer.py),
optimises the graph (passes.py) and compiles its replay code (backends/); a hit
replays that code after checking that the captured state still has its types.

Read static/ in the order a call goes: this module, tracer.py (the recording), ir.py
(the graph), passes.py (optimising and fusing), lowering.py (the program a replay
runs) and backends/interpreter.py (the reference that runs it). Beside the path:
guard.py (what user code sees while recording), reach.py and watch.py (what the
function reaches besides its arguments), fast.py (the check a call makes once a call
has replayed), checking.py (check=True).

    step = dezero.trace(train_step); step(x, t); step(x, t)  # recorded, replayed
"""
from __future__ import annotations

import functools
import inspect
import threading
import time
import warnings
import weakref
from dataclasses import dataclass

import numpy as np

from dezero import core, cuda, layers
from dezero.core import Config, Variable
from dezero.errors import TraceError, where
from dezero.static import debugging
from dezero.static.checking import check_replay, put_back, source_text
from dezero.static.fast import fast_check
from dezero.static.graph import StaticGraph
from dezero.static.guard import overlap, root, unguarded, with_leaves
from dezero.static.ir import type_str
from dezero.static.lowering import container
from dezero.static.passes import optimize
from dezero.static.reach import Structure, changed, held, python_writes, survey
from dezero.static.sizes import bind, broken, has_size
from dezero.static.slots import GradSlot
from dezero.static.tracer import Tracer
from dezero.static.watch import Watch, escaped

# =============================================================================
# Signatures: flatten (the cache key of one call), describe_change
# =============================================================================


def _array_key(data, is_variable, grad):
    # Device: numpy arrays (subclasses such as np.memmap too) are one kind; a cupy
    # array also names its GPU.
    device = "cpu" if isinstance(data, np.ndarray) else ("gpu", data.device.id)
    return ("array", data.shape, data.dtype, device, is_variable, grad is not None)


def flatten(obj, leaves, key, labels, label="", static=False):
    """Append obj's arrays/Variables to leaves, its signature parts to key and a name
    for each part to labels (static: obj is one part, its value, even an array)."""
    labels.append(label)
    if static:
        key.append(static_key(obj, label))
    elif isinstance(obj, Variable):
        key.append(_array_key(obj._data, True, obj.grad))
        leaves.append(obj)
        if obj.grad is not None:
            # The gradient backward() adds to, as eager does: an input of its own.
            key.append(_array_key(obj.grad._data, True, None))
            leaves.append(obj.grad)
            labels.append(f"{label}_grad")
    elif isinstance(obj, cuda.array_types):
        key.append(_array_key(obj, False, None))
        leaves.append(obj)
    elif container(obj):
        key.append((type(obj), tuple(obj) if isinstance(obj, dict) else len(obj),
                    getattr(obj, "default_factory", None)))
        for k, item in obj.items() if isinstance(obj, dict) else enumerate(obj):
            flatten(item, leaves, key, labels, f"{label}_{k}")
    else:
        key.append(static_key(obj, label))


def _repeated(leaves):
    """None, or for each Variable argument the position of its first occurrence: the
    same Variable passed twice is one value (and one .grad) in the recording, so a
    call with two Variables needs a graph of its own."""
    ids = [id(leaf) for leaf in leaves if isinstance(leaf, Variable)]
    return None if len(set(ids)) == len(ids) else tuple(map(ids.index, ids))


def _attribute_key(value):
    if isinstance(value, Variable) and value._data is not None:
        return ("attr", value._data.shape, value._data.dtype, type(value._data))
    return ("attr", type(value).__name__)


def static_key(value, label):
    try:
        hash(value)
    except TypeError:
        raise TypeError(
            f"argument {label} is static (its value is part of the trace's cache key), but "
            f"a {type(value).__name__} is not hashable; pass a tuple or a hashable "
            f"object") from None
    # The type is part of the key: 1, 1.0 and True are equal but trace differently.
    return ("static", type(value), value)


def _kind(part) -> str | None:
    """The tag of a part of a signature: "array", "attr" or "static" (None: untagged)."""
    return part[0] if isinstance(part, tuple) and part and type(part[0]) is str else None


def describe_change(label, old, new) -> str:
    """'x shape (32, 784) -> (16, 784)' for one differing part of a signature."""
    kind = _kind(old) if _kind(old) == _kind(new) else None
    if kind == "array":
        names = ("shape", "dtype", "device", "Variable", "has .grad")
        for name, a, b in zip(names, old[1:], new[1:]):
            if a != b:
                return f"{label} {name} {a} -> {b}"
    if kind == "attr":
        def text(part):
            return type_str(part[1], part[2]) if len(part) > 2 else part[1]
        return f"{label} {text(old)} -> {text(new)}"
    if kind == "static":
        return f"{label}: {old[2]!r} -> {new[2]!r}"
    return f"{label}: {old} -> {new}"


# =============================================================================
# Guards: what a replay assumes about captured state (StateType, GradUnset, NotShared)
# =============================================================================


@dataclass(frozen=True, eq=False)
class StateType:
    """A state node's array has the type it had when recorded (shape, dtype, class)."""

    name: str      # the state value's name in the graph
    slot: object   # where its array lives (slots.py)
    shape: tuple
    dtype: np.dtype
    kind: type     # numpy.ndarray, a cupy array ...

    def check(self) -> bool:
        data = self.slot.read()
        # `is` first: numpy hands out one object per builtin dtype, so the slower ==
        # runs only when the objects differ.
        return data is not None and data.shape == self.shape and type(data) is self.kind \
            and (data.dtype is self.dtype or data.dtype == self.dtype)

    def explain(self) -> str:
        data = self.slot.read()
        now = "None" if data is None else type_str(data.shape, data.dtype)
        return f"state {self.name} {type_str(self.shape, self.dtype)} -> {now}"


@dataclass(frozen=True, eq=False)
class GradUnset:
    """A state's .grad is still None: the recording set it, where a set .grad would have
    been added to by backward() instead."""

    name: str
    var: Variable

    def check(self) -> bool:
        return self.var.grad is None

    def explain(self) -> str:
        return f"state {self.name}.grad None -> set"


@dataclass(frozen=True, eq=False)
class NotShared:
    """State the graph writes in place shares its array with no argument and no other
    state: the replay reads and writes the array as the recording did, which is
    eager's result only while nothing else holds it."""

    types: list    # the StateType of every state, in graph order
    spots: list    # where the state written in place is in `types`

    def check(self, leaves) -> bool:
        return self.shared(leaves) is None

    def shared(self, leaves):
        states = [t.slot.read() for t in self.types]
        arrays = states + [getattr(leaf, "_data", leaf) for leaf in leaves]
        ids = [id(a) for a in arrays]
        # Arguments that view another array's memory (a slice of the data set, or of
        # the state itself): compared by what they view.
        views = {id(root(a)): a for a in arrays[len(states):] if a.base is not None}
        duplicated = len(set(ids)) < len(ids)
        for i in self.spots:
            view = views.get(id(root(states[i]))) if views else None
            if (duplicated and ids.count(ids[i]) > 1) or (
                    view is not None and overlap(view, states[i])):
                return self.types[i].name
        return None

    def explain(self, leaves) -> str:
        return f"state {self.shared(leaves)} shares its array with an argument or other " \
               f"state, and the graph writes into it in place"


# =============================================================================
# Entry: one recorded graph with the guards on its captured state
# =============================================================================


class Entry:
    """A compiled graph plus what its replay assumes about captured state.

    structure  the layers, parameters, hooks and globals the graph was recorded
               with: if one is replaced, added or removed, the entry is dropped
    types      a StateType per state node (data or .grad)
    not_shared a NotShared for the state written in place, or None
    grad_unset a GradUnset per state whose .grad was None before the recording and
               set by it (not state whose old .grad the run cleared unread:
               fresh_grads)
    """

    def __init__(self, graph: StaticGraph, tracer: Tracer, structure: Structure,
                 fresh_grads=frozenset(), key=()):
        self.graph = graph
        self.structure = structure
        self.compiled = graph.compile()
        before = {id(c.node.outputs[0]): c.before_data for c in tracer.captures}
        self.types = []
        for node in graph.of_kind("state"):
            data = before[id(node.outputs[0])]
            if data is None:
                continue  # initialised during the recording: this entry is not kept
            self.types.append(StateType(node.outputs[0].name, node.payload, data.shape,
                                        data.dtype, type(data)))
        in_place = {node.inputs[0].name for node in graph.of_kind("write")
                    if node.attrs.get("in_place")}
        spots = [i for i, t in enumerate(self.types) if t.name in in_place]
        self.not_shared = NotShared(self.types, spots) if spots else None
        self.grad_unset = [GradUnset(c.node.outputs[0].name, c.var) for c in tracer.captures
                           if c.before_grad is None and c.var.grad is not None
                           and c.node.attrs["field"] != "attr"
                           and id(c.var) not in fresh_grads]
        self.grad_unset += [GradUnset(tracer.label(v), v) for v in tracer.unbuilt]
        # The signature it replays: the call's, with the recorded inputs' shapes, which
        # hold names where sizes are symbolic (the relations in graph.relations).
        inputs = iter(node.outputs[0] for node, _ in tracer.inputs)
        self.key = tuple((part[0], next(inputs).shape, *part[2:]) if _kind(part) == "array"
                         else part for part in key)
        self.symbolic = self.key != tuple(key)
        self.labels = [node.outputs[0].name for node, _ in tracer.inputs]
        self.fast = fast_check(self, self.key)

    def subsumes(self, other: Entry) -> bool:
        """True if `other` differs from this entry only in requiring .grad unset,
        while this graph works either way (it clears the grads, never reads them)."""
        read = {id(t.slot.var) for t in self.types if isinstance(t.slot, GradSlot)}
        return bool(other.grad_unset) and not self.grad_unset and \
            all(id(g.var) not in read for g in other.grad_unset) and \
            other.type_failure() is None

    def guard_failure(self, leaves) -> str | None:
        """None if the graph may replay now with these arguments, else why not."""
        reason = self.type_failure()
        if reason is None and self.not_shared is not None and not self.not_shared.check(leaves):
            reason = self.not_shared.explain(leaves)
        return reason or _first_failure(self.grad_unset)

    def type_failure(self) -> str | None:
        return _first_failure(self.types)


def _first_failure(guards) -> str | None:
    """The explanation of the first guard that fails, or None."""
    return next((guard.explain() for guard in guards if not guard.check()), None)


# =============================================================================
# TracedFunction: __call__, lower, the cache
# =============================================================================


class TracedFunction:
    """A function that records itself once per signature and replays afterwards.

    The signature of a call: shapes, dtypes and devices of array/Variable
    arguments; values of other (static) arguments; Config.train and
    Config.enable_backprop. A recorded graph is replayed only while its captured
    state keeps the types it had. At most `max_entries` graphs are kept; beyond
    that a warning is given and new signatures run eagerly.
    """

    def __init__(self, fn, static_argnames=(), check=False, max_entries=8, dynamic=None):
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.check = check
        self.max_entries = max_entries
        if dynamic not in (None, True, False):
            raise TypeError(f"trace({getattr(fn, '__name__', fn)}): dynamic is None "
                            f"(automatic), True or False, got {dynamic!r}")
        self.dynamic = dynamic
        # Automatic dynamic: (argument, axis) of the sizes that record as symbols,
        # once a call differed from a recording only there; and those the function
        # fixes to a number (int(n), a branch on its value), kept static.
        self._symbolic_axes: dict[tuple, str] = {}
        self._fixed_axes: set[tuple] = set()
        self._symbolic: list[Entry] = []  # entries of symbolic sizes, by their pattern
        self.retraces: list[str] = []  # why each recording was made, what became symbolic
        self.static_argnames = frozenset([static_argnames] if isinstance(
            static_argnames, str) else static_argnames)
        self.name = getattr(fn, "__name__", type(fn).__name__)
        try:
            parameters = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        if hasattr(fn, "__dezero_instance__"):
            parameters = parameters[1:]  # self is bound
        self._names = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY,
                                                                p.POSITIONAL_OR_KEYWORD)]
        unknown = self.static_argnames - {p.name for p in parameters}
        if parameters and unknown:
            raise TypeError(f"trace({self.name}): static_argnames {sorted(unknown)} are not "
                            f"parameters of {self.name}")
        self._static_positions = frozenset(i for i, n in enumerate(self._names)
                                           if n in self.static_argnames)
        self._cache: dict[tuple, list[Entry]] = {}
        # (object, name) of attributes that carry values between calls (LSTM.h):
        # found after a recording, then part of the signature and read as state.
        self._carried: list[tuple] = []
        # Where a recording changed Python state (model.calls): once may be an
        # initialisation, which the next recording shows; twice is every call.
        self._python_writes: set[str] = set()
        self._last = None  # (key, labels) of the latest recording, to explain misses
        self._hot = None  # the Entry replayed last, where it has a fast check
        self._per_instance = weakref.WeakKeyDictionary()  # traced method: one per instance
        self._warned = False
        self._stale_streak = 0  # recordings dropped as stale since the last replay
        self.graph: StaticGraph | None = None
        # Signatures being recorded now: a thread that makes the same call meanwhile
        # runs it eagerly (one recording per signature, and no thread waits).
        self._recording: dict[tuple, int] = {}  # signature -> the recording thread

    def __get__(self, obj, objtype=None):
        # Decorating a method: each instance gets its own TracedFunction (its own
        # cache and bound on entries). The instance holds it, so that `del obj` frees
        # both: its graphs' guards may refer back to obj (an optimizer's target),
        # which would keep obj alive for good in a table keyed weakly by obj.
        if obj is None:
            return self
        try:
            table = vars(obj)
        except TypeError:  # __slots__ without a __dict__: a table keyed weakly by obj
            methods, key = self._per_instance, obj
        else:
            methods, key = table.get(_TRACED_METHODS), self
            if methods is None:
                methods = table[_TRACED_METHODS] = _TracedMethods()
        try:
            traced = methods.get(key)
        except TypeError as e:
            raise TypeError(f"trace({self.name}): a traced method needs instances that "
                            f"have a __dict__, or are hashable and weakly referable; "
                            f"{type(obj).__name__} is not") from e
        if traced is None:
            traced = methods[key] = TracedFunction(
                _bind_weakly(self.fn, obj), self.static_argnames, self.check,
                self.max_entries, self.dynamic)
        return traced

    def __repr__(self):
        return f"<traced {self.name}: {self.entries} graphs>"

    @property
    def entries(self) -> int:
        return sum(len(v) for v in self._cache.values()) + len(self._symbolic)

    # ---- signature --------------------------------------------------------
    def _signature(self, args, kwargs, labels=None):
        leaves, key = [], []
        if labels is None and not kwargs and not self._static_positions:
            # The common call, f(x, t) with arrays or Variables: the same key as
            # below, built without a call per argument.
            for arg in args:
                if isinstance(arg, Variable) and arg.grad is None:
                    d = arg._data
                    key.append(("array", d.shape, d.dtype, "cpu" if isinstance(
                        d, np.ndarray) else ("gpu", d.device.id), True, False))
                elif type(arg) is np.ndarray:
                    key.append(("array", arg.shape, arg.dtype, "cpu", False, False))
                else:
                    flatten(arg, leaves, key, [])
                    continue
                leaves.append(arg)
        else:
            named = [] if labels is None else labels  # a name for each part of the key
            for i, arg in enumerate(args):
                label = self._names[i] if i < len(self._names) else f"arg{i}"
                flatten(arg, leaves, key, named, label, static=i in self._static_positions)
            for name in sorted(kwargs):
                key.append(name)
                named.append(f"{name}=")
                flatten(kwargs[name], leaves, key, named, name,
                        static=name in self.static_argnames)
        key += [(Config.train, Config.enable_backprop), _repeated(leaves)]
        key += [_attribute_key(getattr(holder, name, None)) for holder, name in self._carried]
        if labels is not None:
            labels += ["Config (train, enable_backprop)", "the same Variable passed twice"]
            labels += [f"{type(holder).__name__}.{name}" for holder, name in self._carried]
        return tuple(key), leaves

    def _miss_reason(self, key, args, kwargs) -> str:
        if self._last is None:
            return "first call"
        old_key, old_labels = self._last
        labels = []
        self._signature(args, kwargs, labels)
        if len(old_key) != len(key):
            if len(old_key) < len(key) and all(a == b for a, b in zip(old_key, key)):
                return f"reads {', '.join(labels[len(old_key):])} as carried state"
            return "the structure of the arguments changed"
        for label, old, new in zip(labels, old_key, key):
            if old != new:
                return describe_change(label, old, new)
        return "new signature"

    # ---- calls ------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        hot = self._hot  # the entry replayed last: its fast check first (fast.py)
        if hot is not None and not kwargs and hot.fast(*args):
            return hot.compiled.replay(args)
        if core.current_tracer() is not None:
            # Called while another trace records: run inline so that one records it all.
            return self.fn(*args, **kwargs)
        key, leaves = self._signature(args, kwargs)
        entries = self._cache.get(key)
        reason = None
        if not entries and self._symbolic:
            entry, reason = self._symbolic_entry(key, leaves, args, kwargs)
            if entry is not None:
                self._stale_streak = 0
                if debugging.LEVEL >= 2:
                    return self._replay_logged(entry, leaves)
                self._hot = entry if entry.fast is not None and not kwargs else None
                return entry.compiled.replay(leaves)
        if entries:
            for entry in entries:
                reason = entry.structure.changed() or entry.guard_failure(leaves)
                if reason is None:
                    self._stale_streak = 0
                    if debugging.LEVEL >= 2:
                        return self._replay_logged(entry, leaves)
                    self._hot = entry if entry.fast is not None and not kwargs else None
                    return entry.compiled.replay(leaves)
        elif reason is None:
            reason = self._miss_reason(key, args, kwargs)
        self._hot = None
        self._drop_stale()
        if self.entries >= self.max_entries or self._stale_streak > self.max_entries:
            if not self._warned:
                self._warned = True
                warnings.warn(f"{self.name} has been traced {self.entries} times (the "
                              f"limit, max_entries); new signatures now run eagerly. Last "
                              f"change: {reason}" if self.entries >= self.max_entries else
                              f"{self.name} was recorded {self._stale_streak} times in a "
                              f"row, what it reads changing before each call (last: "
                              f"{reason}); it now runs eagerly\n  fix: keep a number that "
                              f"changes between calls in a Variable, or pass it as an "
                              f"argument", stacklevel=2)
            return self.fn(*args, **kwargs)
        me = threading.get_ident()
        if self._recording.setdefault(key, me) != me:  # atomic: one thread records it
            return self.fn(*args, **kwargs)
        try:
            return self._record(key, leaves, args, kwargs, reason)[0]
        finally:
            del self._recording[key]

    def _symbolic_entry(self, key, leaves, args, kwargs):
        """(the entry of symbolic sizes this call replays, None), or (None, why none)."""
        labels = []  # the parts' labels, made only to explain a miss

        def describe(i, old, new):
            if not labels:
                self._signature(args, kwargs, labels)
            return describe_change(labels[i], old, new)

        reason = None
        for entry in self._symbolic:
            reason = _pattern_failure(entry, key, describe)
            if reason is None:
                reason = entry.structure.changed() or entry.guard_failure(leaves)
            if reason is None:
                return entry, None
        return None, reason

    def _symbolic_sizes(self, key) -> dict:
        """(argument, axis) -> name for the sizes this recording makes symbolic: every
        size of 2 or more under dynamic=True; under automatic dynamic those in which a
        call has differed from a recording of the same structure. Sizes equal in this
        call share a name (the relation x.shape[0] == t.shape[0]); 0 and 1 broadcast
        and stay numbers."""
        shapes = [part[1] for part in key if _kind(part) == "array"]
        if self.dynamic is False:
            return {}
        if self.dynamic is None:
            for old in [*self._cache, *(e.key for e in self._symbolic)]:
                for spot in _size_changes(old, key):
                    if spot not in self._fixed_axes:
                        self._symbolic_axes.setdefault(spot, "")
            axes = list(self._symbolic_axes)
        else:
            axes = [(i, a) for i, shape in enumerate(shapes) for a in range(len(shape))]
        chosen, by_size = {}, {}
        for i, a in axes:
            n = shapes[i][a] if i < len(shapes) and a < len(shapes[i]) else 0
            if isinstance(n, int) and n >= 2 and n not in by_size:
                # B for a batch (axis 0), T for a length (axis 1), where still free
                free = [m for m in _SIZE_NAMES[a:a + 1] + _SIZE_NAMES
                        if m not in by_size.values()]
                by_size[n] = free[0] if free else f"S{len(by_size)}"
            if n in by_size:
                chosen[(i, a)] = by_size[n]
        return chosen

    def _drop_stale(self):
        # A graph recorded with a layer, hook or model that has since been replaced
        # can never replay again; dropping it keeps max_entries for live ones.
        stale = len(self._symbolic)
        self._symbolic = [e for e in self._symbolic if e.structure.changed() is None]
        stale = len(self._symbolic) < stale
        for key, entries in list(self._cache.items()):
            live = [e for e in entries if e.structure.changed() is None]
            stale |= len(live) < len(entries)
            entries[:] = live
            if not entries:
                del self._cache[key]
        if stale:
            self._carried = []  # found again on the new structure
            self._stale_streak += 1

    def lower(self, *args, **kwargs) -> StaticGraph:
        """Record the graph for these example arguments and return it (also cached).

        The function runs once eagerly to be recorded; captured state and the
        random state are put back afterwards, so lowering a training step does not
        step the model.
        """
        key, leaves = self._signature(args, kwargs)
        reason = "lower" if self._last is None else self._miss_reason(key, args, kwargs)
        return self._record(key, leaves, args, kwargs, reason, restore_state=True)[1]

    def _replay_logged(self, entry, leaves):
        start = time.perf_counter()
        result = entry.compiled.replay(leaves)
        elapsed = time.perf_counter() - start
        # By shape and dtype: Values, Variables and arrays (cupy's .data is a pointer).
        moved = sum(v.dtype.itemsize * int(np.prod(v.shape))
                    for v in (*entry.graph.nodes[-1].inputs, *leaves))
        debugging.log(2, f"replay {self.name}: {elapsed * 1e3:.3f} ms, {moved} bytes in/out")
        return result

    # ---- recording -------------------------------------------------------------
    def _record(self, key, leaves, args, kwargs, reason, restore_state=False):
        """Run the function once under a Tracer and make its graph: (the eager result,
        the optimised graph), its compiled entry cached where it may replay."""
        self._hot = None  # a new entry may take the place of the one replayed last
        # 1. The run, recorded: arguments become inputs (guards for arrays).
        labels = []
        self._signature(args, kwargs, labels)
        leaf_labels = [label for label, part in zip(labels, key)
                       if _kind(part) == "array"]
        start = time.perf_counter()
        attrs_before = [(h, n, getattr(h, n, None)) for h, n in self._carried]
        symbolic = self._symbolic_sizes(key)
        tracer = Tracer(self.name, attrs_before, symbolic)
        seen = [tracer.add_input(label, leaf) for label, leaf in zip(leaf_labels, leaves)]
        call_args, call_kwargs = with_leaves(args, kwargs, self._static_positions,
                                             self.static_argnames, seen)
        copies = held(call_args, call_kwargs, self._names)
        random_state = np.random.get_state() if (self.check or restore_state) else None
        before = survey(self.fn, args, kwargs, set(), lambda v: False, set())[0]
        watch = Watch(tracer.computed)
        previous, observer = core.set_tracer(tracer), layers.set_observer(watch)
        try:
            result = self.fn(*call_args, **call_kwargs)
        except (TraceError, TypeError) as e:
            _explain_dtypes(tracer, leaf_labels, leaves, e)
            raise
        finally:
            core.set_tracer(previous)
            layers.set_observer(observer)
        lost = changed(copies)
        if lost:  # the caller's containers never saw it: even this call differs from eager
            raise TraceError(
                f"{self.name} changes its argument {', '.join(lost)} ({where()}); "
                f"a traced function runs on copies of its container arguments and a replay "
                f"runs no Python, so the change would reach neither the caller nor later "
                f"calls\n  fix: return what you add and change the container outside the "
                f"traced function, or keep a number that changes in a Variable")
        tracer.left_cleared(watch.clears.values())
        # 2. What the function reached besides its arguments: the structure to guard,
        # attributes carrying values to the next call, Python state it changed.
        structure, attr_writes, transient, places = survey(
            self.fn, args, kwargs, {id(v) for v in [c.var for c in tracer.captures] +
                                    tracer.unbuilt}, tracer.computed,
            {(id(h), n) for h, n in self._carried}, tracer.const_sources)
        attr_writes += watch.carried(attr_writes)
        for holder, number in watch.numbers.values():  # read as numbers: a change retraces
            structure.add(vars(holder), {number.value_key: vars(holder)[number.value_key]},
                          None, f"{type(holder).__name__}.{number.name}", "number")
        writes = python_writes(before)
        again = [what for where, what in writes if where in self._python_writes]
        if again:
            raise TraceError(
                f"{self.name} changes Python state at every call ({', '.join(again)}); a "
                f"replay runs no Python, so it would change nothing\n  fix: keep a number "
                f"that changes in a Variable (self.calls = Variable(np.array(0)), then "
                f"self.calls.data += 1), draw random numbers with dezero's random ops or "
                f"outside the traced function, or make the change outside it")
        self._python_writes.update(where for where, _ in writes)
        # Weak references to the Variables the run computed -> the Value each holds.
        computed = {weakref.ref(k.var): k.value for k in tracer.known.values() if k.computed}
        # `return y.data`: y stays alive behind the array (in `behind`), by design.
        alive_by_design = [unguarded(result, behind := []), behind, *transient,
                           *(v for _, _, v in attr_writes), *(c.var.grad for c in tracer.captures),
                           *(leaf.grad for leaf in leaves if isinstance(leaf, Variable))]
        found = [(h, n) for h, n, _ in attr_writes
                 if not any(h is h2 and n == n2 for h2, n2 in self._carried)]
        self._carried += found
        new = [f"{type(h).__name__}.{n}" for h, n in found]
        # 3. The graph, optimised and compiled; kept unless the run was not one that
        # repeats (it initialised state, found carried values, changed Python state).
        graph = recorded_graph = tracer.finish(result, attr_writes, places)
        result = unguarded(result)
        recorded = time.perf_counter()
        if debugging.LEVEL >= 5:
            debugging.log(5, f"recorded:\n{graph}")
        graph = optimize(graph)
        self._warn_constant_outputs(graph)
        # check=True replays random ops from the random state before the run; state
        # initialised in the run drew from it first, so the next call is checked.
        unchecked = self.check and watch.did_initialise and any(
            n.record.random for n in graph.of_kind("op"))
        not_kept = [why for why, holds in (
            (f"state {', '.join(tracer.uninitialised)} was initialised in the run",
             tracer.uninitialised),
            (f"{', '.join(new)} carry values out of the run, the next call records them "
             f"as state", new),
            (f"the run changed {', '.join(w for _, w in writes)}", writes),
            ("check=True waits for a call that initialises nothing before random ops",
             unchecked)) if holds]
        kept = not not_kept
        entry = Entry(graph, tracer, structure, watch.fresh_grads, key)
        if debugging.LEVEL >= 4:  # the interpreter generates no code: its program
            code = getattr(entry.compiled, "source", None) or f"{graph.program}\n"
            debugging.log(4, f"replay code of {self.name}:\n{code}")
        if self.check and kept:  # a graph not kept is never replayed: nothing to check
            check_replay(self.name, tracer, recorded_graph, entry, leaves, result,
                         random_state, attrs_before, attr_writes)
        if restore_state:
            # watch.before: attributes this recording found (LSTM.h)
            put_back(tracer.state_before(), [*attrs_before, *watch.before.values()],
                     random_state)
        self.graph = graph
        self._last = (key, labels)
        debugging.log(1, f"{'trace' if reason == 'first call' else 'retrace'} {self.name}: "
                         f"{reason}; {graph.counts()}, {len(graph.groups)} kernels; "
                         f"recorded in {(recorded - start) * 1e3:.1f} ms, prepared in "
                         f"{(time.perf_counter() - recorded) * 1e3:.1f} ms"
                         + "".join(f"; not kept: {why}" for why in not_kept))
        # 4. Nothing the run computed may stay held where no replay would update it.
        ops = tracer.ops
        # The recording's own references to the run's Variables go (a guard kept past
        # the recording leads to the tracer, so the tracer lets go of them too).
        tracer.known.clear()
        tracer.recorded.clear()  # the Functions hold their inputs (a Constant of a guard)
        del tracer, watch, seen, call_args, call_kwargs
        for var, kinds in escaped(computed, alive_by_design)[:1]:
            node = next((n for n in ops if computed[weakref.ref(var)] in n.outputs), None)
            what = type_str(var.shape, var.dtype) + (
                f" from {node.op}" + (f" at {source_text(node.source)}" if node.source
                                      else "") if node is not None else "")
            raise TraceError(
                f"{self.name}: a Variable it computed ({what}) is still held after the call "
                f"by {', '.join('a ' + kind for kind in kinds)} that the tracer cannot reach "
                f"from the function's globals, closure and arguments, so a replay would "
                f"never update it\n  fix: keep state carried between calls as an attribute "
                f"of a Layer or of an object the function reads (self.h = h), or return it")
        self.retraces.append(reason + self._note_sizes(symbolic, leaf_labels, recorded_graph))
        if kept and entry.symbolic:
            self._symbolic.append(entry)
        elif kept:
            entries = self._cache.setdefault(key, [])
            entries[:] = [e for e in entries if not entry.subsumes(e)]
            entries.append(entry)
        return result, graph

    def _note_sizes(self, symbolic, labels, graph) -> str:
        """'; symbolic: x axis 0 is B' for the sizes the recording kept symbolic; a
        size the function fixed (int(n), a branch on its value) stays static from now."""
        shapes = [v.shape for v in graph.input_values]
        kept, fixed = [], []
        for i, axis in symbolic:
            if has_size(shapes[i][axis]):
                kept.append(f"{labels[i]} axis {axis} is {shapes[i][axis]}")
            else:
                fixed.append(f"{labels[i]} axis {axis}")
                if self.dynamic is None:
                    self._symbolic_axes.pop((i, axis), None)
                    self._fixed_axes.add((i, axis))
        note = f"; symbolic: {', '.join(kept)}" if kept else ""
        if fixed:
            note += f"; static: {', '.join(fixed)} (the function reads it as a number)"
        if note:
            debugging.log(1, f"sizes of {self.name}{note}")
        return note

    def _warn_constant_outputs(self, graph):
        consts = {id(n.outputs[0]) for n in graph.of_kind("const")}
        constant = [v.name for v in graph.output_values if id(v) in consts]
        if constant and graph.of_kind("input"):
            warnings.warn(
                f"{self.name}: output {', '.join(constant)} depends on no argument or "
                f"state, so every replay returns the recorded value; numpy math on array "
                f"arguments is not recorded (pass Variables, or use dezero functions)",
                stacklevel=4)

# The names symbolic sizes get: B for axis 0 and T for axis 1 where free, else the
# next free one, in the order a recording meets new sizes.
_SIZE_NAMES = ("B", "T", "N", "M", "K", "L", "P", "Q", "R", "S")


def _size_changes(old, new) -> list:
    """[(argument, axis)] where signature `new` differs from `old` only in sizes
    (same structure, dtypes and ranks); [] where it differs otherwise."""
    if len(old) != len(new):
        return []
    spots, i = [], 0
    for a, b in zip(old, new):
        if _kind(a) == "array" and _kind(b) == "array":
            if a[2:] != b[2:] or len(a[1]) != len(b[1]):
                return []
            spots += [(i, axis) for axis, (m, n) in enumerate(zip(a[1], b[1])) if m != n]
            i += 1
        elif a != b:
            return []
    return spots


def _pattern_failure(entry, key, describe) -> str | None:
    """None if the call's signature fits the entry's symbolic one (ranks, static
    sizes, the relations between sizes), else why not (describe(i, old, new) tells
    a part that differs in more than sizes)."""
    pattern = entry.key
    if len(pattern) != len(key):
        return "the structure of the arguments changed"
    want, got = [], []
    for i, (a, b) in enumerate(zip(pattern, key)):
        if _kind(a) == "array" and _kind(b) == "array" and a[2:] == b[2:]:
            want.append(a[1])
            got.append(b[1])
        elif a != b:
            if _kind(a) == _kind(b) == "array":  # the sizes fit or not below: say the rest
                a = (a[0], b[1], *a[2:])
            return describe(i, a, b)
    bindings, why = bind(want, got, entry.labels)
    if why is not None:
        return why
    relation = broken(entry.graph.relations, bindings)
    return None if relation is None else f"sizes {bindings} break {relation}"


def _explain_dtypes(tracer, labels, leaves, error):
    """Re-raise a recording's TraceError as a dtype mismatch when a float argument
    meets float state of another dtype (a float64 batch into a float32 model), or
    an op's arrays on two devices as an argument meeting state on the other one."""
    if cuda.TWO_DEVICES in str(error) and leaves:
        raise cuda.argument_error(tracer, labels, leaves, error) from error
    if not isinstance(error, TraceError):
        return
    state = [c for c in tracer.captures if c.before_data is not None
             and c.before_data.dtype.kind == "f"]
    for label, leaf in zip(labels, leaves):
        dtype = getattr(leaf, "_data", leaf).dtype
        other = next((c for c in state if c.before_data.dtype != dtype), None)
        if dtype.kind == "f" and other is not None:
            raise TraceError(
                f"argument {label} is {dtype} but the state it meets is "
                f"{other.before_data.dtype} ({tracer.label(other.var)}): eager numpy "
                f"would turn that state into {dtype}, which a graph cannot do\n  fix: "
                f"pass {label}.astype(np.{other.before_data.dtype}), or convert the model "
                f"to {dtype} before tracing\n  (while recording: {error})") from error


# The attribute under which an instance keeps its traced methods.
_TRACED_METHODS = "_dezero_traced_methods"


class _TracedMethods(dict):
    """An instance's traced methods (descriptor -> TracedFunction). A copy of the
    instance (copy.deepcopy, pickle) starts with none: graphs bound to the original
    would replay the original's state."""

    def __reduce__(self):
        return _TracedMethods, ()


def _bind_weakly(fn, obj):
    """fn with obj bound as its first argument, held by a weak reference."""
    instance = weakref.ref(obj)

    @functools.wraps(fn)
    def method(*args, **kwargs):
        return fn(instance(), *args, **kwargs)
    method.__dezero_instance__ = instance  # read by reach.survey
    return method


def trace(fn=None, *, static_argnames=(), check=False, max_entries=8, dynamic=None):
    """Trace `fn`: usable as @trace, @trace(check=True) or trace(fn, static_argnames=...).

    static_argnames  parameters whose values select a graph (counts, flags, modes)
                     instead of being inputs; other non-array arguments are static too
    check            replay once right after each recording, unfused, and raise
                     TraceError naming the first output or state that differs from
                     the eager run (for random ops this compares numpy's draws; cupy's random
                     state is not replayed, so leave check off for GPU dropout)
    max_entries      how many graphs to keep; beyond that, new signatures run eagerly
    dynamic          None (automatic): shapes are static until a call differs from a
                     recording only in sizes; those sizes then record as symbols
                     (B, T), one graph for all of them. True: every size of 2 or more
                     is symbolic from the first call. False: one graph per shape

    Outputs of a replay are fresh Variables without a graph behind them (an argument
    returned as it is comes back as that very object): call backward() inside the
    traced function. See dezero.static for the tour.
    """
    if fn is None:
        return functools.partial(trace, static_argnames=static_argnames, check=check,
                                 max_entries=max_entries, dynamic=dynamic)
    return TracedFunction(fn, static_argnames=static_argnames, check=check,
                          max_entries=max_entries, dynamic=dynamic)


__all__ = ["trace", "TracedFunction", "TraceError"]
