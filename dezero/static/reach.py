"""What a traced function reaches besides its arguments: the structure its graph
assumes, and the attributes that carry values from one call to the next.

Used by trace.py after each recording. `survey` walks from the function's globals,
closure cells and static arguments through layers, optimizers, hooks, dicts, lists,
user modules and user classes, with no cap on size. It returns a Structure, whose
`changed()` runs before every replay and names what was replaced, added or
removed (a rebuilt model, a swapped layer, optimizer.setup(other), a new hook,
cleared optimizer state), and the (holder, name) attributes that hold a Variable
the run computed (LSTM.h), which later calls read and write as state.

    structure, carried, transient, places = survey(fn, args, kwargs, captured, computed,
                                                   known)
"""
from __future__ import annotations

import collections
import functools
import operator
import os
import pickle
import random
import re
import sys
import sysconfig
import types
import weakref

import numpy as np

from dezero import cuda
from dezero.core import Function, Variable
from dezero.errors import TraceError
from dezero.layers import Layer
from dezero.optimizers import Hyperparameter, Optimizer

_GONE = object()
# Files under these folders are libraries, whose module attributes hold no models.
_LIBRARIES = tuple({os.path.join(os.path.abspath(sysconfig.get_paths()[key]), "")
                    for key in ("stdlib", "platstdlib", "purelib", "platlib")} |
                   {os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
                       __file__))), "")})
# Values whose identity says nothing about structure (a changed number or array that
# the graph reads is an argument, state or a constant, guarded elsewhere).
_ATOMS = (str, bytes, int, float, complex, bool, type(None), slice, range, np.generic,
          np.dtype, *cuda.array_types)
# Numbers and names a layer, a user's object or a dict holds (self.scale,
# BatchNorm.decay, settings["scale"]): the graph froze the ones it read, so a
# changed one retraces.
_NUMBERS = (str, bytes, int, float, complex, bool, np.generic, type(None))
_GENERATORS = (np.random.Generator, np.random.RandomState, random.Random)
_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              functools.partial)


def is_user_module(module) -> bool:
    """True for the user's modules (and __main__, a notebook), not libraries."""
    if not isinstance(module, types.ModuleType):
        return False
    path = getattr(module, "__file__", None)
    if path is None:  # __main__ in a notebook, or a module made at run time
        return module.__name__ not in sys.builtin_module_names
    return not os.path.abspath(path).startswith(_LIBRARIES)


# =============================================================================
# Structure: the guard checked before every replay
# =============================================================================


class Structure:
    """Identities a recorded graph assumes: each must still hold for a replay.

    namespaces  (mapping, keys, values, length, label, style): mapping[key] is still
                each value (globals, attributes of layers, optimizers and hooks, dict
                items), and, where length is not None, nothing was added or removed;
                style ("global", "attribute" or "item") spells a key in a reason
    sequences   (list, snapshot, label): the list still holds the same objects
    cells       (cell, value, label): a closure variable still names value
    arrays      (array, copy, label): an array the graph copied as a constant (a
                global mask), or that a global or closure variable names or a layer
                or optimizer holds, still holds the copy's values
    generators  (generator, its state, label): the user's random generators reached
                (not guarded: python_writes compares them across a recording)
    contents    (dict, list, set or deque, its items, label): the containers reached
                (not guarded either: python_writes compares them, list.append included)
    """

    def __init__(self):
        self.namespaces, self.sequences, self.cells, self.generators = [], [], [], []
        self.arrays, self.contents = [], []
        self._fast = None

    def add(self, mapping, bound: dict, length, label, style):
        self.namespaces.append((mapping, tuple(bound), tuple(bound.values()), length,
                                label, style))

    def changed(self) -> str | None:
        """None if every identity holds, else what changed (the reason to retrace)."""
        namespaces, sequences, cells, contents, arrays = self._fast or self._compile()
        # Tuples compare items by identity first, and the objects here (layers,
        # Variables, functions, lists) are equal only to themselves or to equal
        # contents, so a comparison is false exactly when something was replaced.
        try:
            for mapping, get, values, length in namespaces:
                if get(mapping) != values or (length is not None and len(mapping) != length):
                    return self._explain()
            for items, snapshot in sequences:
                if tuple(items) != snapshot:
                    return self._explain()
            if tuple(map(_contents, cells)) != contents:
                return self._explain()
            for array, copy in arrays:
                if not _same(array, copy):
                    return self._explain()
        except (KeyError, ValueError):  # a key removed; an array compared by value
            return self._explain()
        return None

    def _compile(self):
        # itemgetter reads all the keys of a namespace in one call: a few times
        # faster than a loop, and this runs before every replay. A lone key is read
        # twice, so that it too gives a tuple, compared by identity first (a lone
        # array would be compared elementwise, and always look changed).
        namespaces = [(mapping, operator.itemgetter(*keys) if len(keys) > 1 else
                       operator.itemgetter(keys[0], keys[0]), values if len(keys) > 1 else
                       values * 2, length)
                      for mapping, keys, values, length, _, _ in self.namespaces if keys]
        namespaces += [(mapping, len, length, None)
                       for mapping, keys, _, length, _, _ in self.namespaces
                       if not keys and length is not None]
        self._fast = (namespaces, [(items, snapshot) for items, snapshot, _ in self.sequences],
                      [cell for cell, _, _ in self.cells],
                      tuple(value for _, value, _ in self.cells),
                      [(array, copy) for array, copy, _ in self.arrays])
        return self._fast

    def tests(self, bind) -> list[tuple]:
        """The checks of changed() as (Python expression, what it checks): each is true
        while its identities hold (fast.py joins them); bind(value) names a global of
        the generated code that holds value."""
        found = []
        for mapping, keys, values, length, label, _ in self.namespaces:
            name = bind(mapping)
            found += [(f"{bind(operator.itemgetter(*keys, keys[0]))}({name}) == "
                       f"{bind((*values, values[0]))}", label)] if keys else []
            found += [(f"len({name}) == {length}", label)] if length is not None else []
        found += [(f"tuple({bind(items)}) == {bind(snapshot)}", label)
                  for items, snapshot, label in self.sequences]
        found += [(f"{bind(_contents)}({bind(cell)}) is {bind(value)}", label)
                  for cell, value, label in self.cells]
        return found + [(f"{bind(_same)}({bind(array)}, {bind(copy)})", f"array {label}")
                        for array, copy, label in self.arrays]

    def _explain(self) -> str:
        for mapping, keys, values, length, label, style in self.namespaces:
            for key, value in zip(keys, values):
                if mapping.get(key, _GONE) is not value and style != "number":
                    return f"{_spell(label, key, style)} was replaced or removed"
                if style == "number" and mapping[key] != value:  # a hyperparameter read
                    return f"{label} {value!r} -> {mapping[key]!r}, a number the graph holds"
            if length is not None and len(mapping) != length:
                return f"{label} gained or lost an {style}"
        for items, snapshot, label in self.sequences:
            if len(items) != len(snapshot) or any(map(operator.is_not, items, snapshot)):
                return f"{label} changed"
        for cell, value, label in self.cells:
            if _contents(cell) is not value:
                return f"{label} was rebound"
        for array, copy, label in self.arrays:
            if not _same(array, copy):
                return f"array {label}, read as a constant, was changed in place"
        return "the structure changed"


def python_writes(before: Structure) -> list[tuple[str, str]]:
    """(where, what) such as ('model.calls', 'model.calls 0 -> 1') for each number
    or string that `before` (the structure surveyed before a run) bound and the run
    changed, each container and named array it changed (log.append(n), count[0] +=
    1), and each random generator of the user's that it drew from: a replay runs no
    Python, so it would do none of these again."""
    found = []
    for mapping, keys, values, _, label, style in before.namespaces:
        for key, old in zip(keys, values):
            new = mapping.get(key, _GONE)
            if isinstance(old, _NUMBERS) and old is not None and new is not old and \
                    new != old:
                where = _spell(label, key, style)
                found.append((where, f"{where} {old!r} -> {new!r}"))
    found += [(label, f"random generator {label} drew numbers") for generator, state,
              label in before.generators if _generator_state(generator) != state]
    found += [(label, f"array {label} changed in place") for array, copy, label
              in before.arrays if not _same(array, copy)]  # (count[0] += 1)
    found += [(label, f"{label} changed ({len(items)} -> {len(container)} items)")
              for container, items, label in before.contents
              if not _same_items(_items(container), items)]
    return found


def held(args, kwargs, names) -> list:
    """Each list, dict or other mutable container in the arguments (the copies the
    traced function gets), with a label and a snapshot of its items, for changed()."""
    found = []

    def walk(obj, label):
        if isinstance(obj, (list, dict)):
            found.append((obj, label, _items(obj)))
        if isinstance(obj, (list, dict, tuple)):
            for k, v in (obj.items() if isinstance(obj, dict) else enumerate(obj)):
                walk(v, f"{label}[{k!r}]")

    for i, a in enumerate(args):
        walk(a, names[i] if i < len(names) else f"arg{i}")
    for k, v in kwargs.items():
        walk(v, k)
    return found


def changed(found) -> list:
    """The labels of the containers of held() the run changed (log.append(n))."""
    return [label for obj, label, items in found if not _same_items(_items(obj), items)]


def _items(container) -> tuple:
    return (*container, *(container.values() if isinstance(container, dict) else ()))


def _same_items(a, b) -> bool:
    """Whether two snapshots hold the same objects (or equal numbers and names)."""
    return len(a) == len(b) and all(x is y or (type(x) is type(y) and isinstance(
        x, _NUMBERS) and x == y) for x, y in zip(a, b))


def _spell(label, key, style) -> str:
    return {"global": f"global {key}", "attribute": f"{label}.{key}",
            "item": f"{label}[{key!r}]"}[style]


def _generator_state(generator) -> bytes:
    state = generator.getstate() if isinstance(generator, random.Random) else \
        generator.bit_generator.state if isinstance(generator, np.random.Generator) else \
        generator.get_state(legacy=False)
    return pickle.dumps(state)  # states hold arrays: compared as bytes


def _same(array, copy) -> bool:
    xp = cuda.get_array_module(array)
    return bool(xp.array_equal(array, copy, equal_nan=array.dtype.kind in "fc"))


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not assigned (yet, or any more)
        return _GONE


# =============================================================================
# survey: one walk for the structure and the carried attributes
# =============================================================================


def survey(fn, args, kwargs, captured: set, computed, known: set, constants=()):
    """(Structure, [(holder, name, Variable)], [Variable], places) for a run of
    fn(*args, **kwargs): the guard, the carried attributes, the per-update values that
    optimizers keep (alive after the run by design, not carried), and where each
    captured Variable lives, by the shortest path the code reaches it with
    ({id: "model.l0.W"}; an optimizer's slot of a parameter: "adam.ms[l0.W]").

    captured  ids of the Variables the graph reads as state
    computed  computed(v): whether the run computed Variable v (Tracer.computed)
    known     (id(holder), name) of attributes already read as carried state
    constants the arrays the graph copied as constants: where the walk finds one,
              a change to its values retraces
    """
    walk = _Walk(captured, computed, known, constants)
    walk.visit_unnamed(*args, *kwargs.values())
    functions, seen, namespaces, used = walk.functions, set(), {}, set()
    functions.append(fn)
    while functions:
        f = functions.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        walk.quiet = id(f) in walk.quiet_functions
        while isinstance(f, functools.partial):
            walk.visit_unnamed(*f.args, *f.keywords.values())
            f = f.func
        if isinstance(f, types.MethodType):
            walk.visit_unnamed(f.__self__)
            f = f.__func__
        instance = getattr(f, "__dezero_instance__", None)  # a traced method's self
        if instance is not None:
            walk.visit_unnamed(instance())
            f = f.__wrapped__
        if not isinstance(f, types.FunctionType):
            walk.visit_unnamed(f)  # a callable object, such as a Model
            continue
        # step(x, model=model): a default is bound for good
        walk.visit_unnamed(*f.__defaults__ or (), *(f.__kwdefaults__ or {}).values())
        for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
            value = _contents(cell)
            if value is _GONE or walk.computed_here(value):
                continue  # a computed value in a cell: the check for escapes reports it
            walk.structure.cells.append((cell, value, f"{name} (closure of {f.__name__})"))
            walk.bound(value, name)
        module = sys.modules.get(f.__globals__.get("__name__"))
        holder = module if module is not None and module.__dict__ is f.__globals__ else None
        bound = namespaces.setdefault(id(f.__globals__), (f.__globals__, {}))[1]
        used.update(_names(f.__code__))
        for name in dict.fromkeys(_names(f.__code__)):
            if name not in f.__globals__:
                continue  # an attribute name, or a builtin
            value = f.__globals__[name]
            if walk.carried_value(holder, name, value, f"global {name}"):
                continue
            # Every global the code names is bound: a rebound name (a notebook cell
            # run again) may hold a new model, function or constant.
            bound[name] = value
            walk.bound(value, name)
    for mapping, bound in namespaces.values():
        walk.structure.add(mapping, bound, None, "globals", "global")
    for module in walk.modules:  # config.scale: the numbers of a module the code names
        numbers = {k: v for k, v in vars(module).items() if k in used and
                   isinstance(v, _NUMBERS)}
        if numbers:
            walk.structure.add(module.__dict__, numbers, None, module.__name__, "attribute")
    renamed = {old: walk.labels[key] for old, key in walk.shorter}
    for key, place in walk.places.items() if renamed else ():
        walk.places[key] = _rewritten(place, renamed)
    # An optimizer's slot is named by its parameter's place, without the root the
    # table's parameters share (opt.ms[l0.W]); with several roots (two models), in full.
    slots = [(label, value, walk.places[id(key)]) for label, key, value in walk.slot_tables
             if id(value) in captured and id(key) in walk.places]
    roots = {(label, path.partition(".")[0]) for label, _, path in slots}
    for label, value, path in slots:
        short = "." in path and sum(table == label for table, _ in roots) == 1
        walk.places[id(value)] = f"{label}[{path.partition('.')[2] if short else path}]"
    return walk.structure, walk.carried, walk.transient, walk.places


@functools.cache
def _read_afresh(cls) -> frozenset:
    """The attributes behind an optimizer's hyperparameters (opt.lr): every replay
    reads them afresh from their Variables, so a new value needs no new graph (trace.py
    guards those a run read as Python numbers, Watch.hyperparameter_read)."""
    return frozenset(attr.value_key for klass in cls.__mro__ for attr in vars(klass).values()
                     if isinstance(attr, Hyperparameter))


def _rewritten(place: str, renamed: dict) -> str:
    """place with each object on its path reached by a shorter path too spelled by
    that ({'adam.target': 'net'}: adam.target.l0.W is net.l0.W), longest first."""
    for cut in [m.start() for m in re.finditer(r"[.[]", place)][::-1]:
        if place[:cut] in renamed:
            return _rewritten(renamed[place[:cut]] + place[cut:], renamed)
    return place


def _rank(label: str):
    """Places compare by their number of steps, then in order: the least is kept."""
    return label.count(".") + label.count("["), label


def _shown(holder, name):
    """An attribute's name as code spells it: '_t' behind Adam's property t, '_alpha'
    behind the hyperparameter alpha, is 't' or 'alpha'."""
    if isinstance(name, str) and name.startswith("_") and any(
            name[1:] in vars(k) for k in type(holder).__mro__):
        return name[1:]
    return name


def _names(code):
    """Global names a code object (and the functions defined inside it) uses."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names(const)
    return names


class _Walk:
    def __init__(self, captured, computed, known, constants):
        self.captured, self.computed, self.known = captured, computed, known
        self.constants = {id(array): array for array in constants}  # alive: the tracer's
        self.structure, self.carried, self.transient = Structure(), [], []
        self.functions: list = []            # methods of the user's classes, for survey
        # Walking what a library, dezero or a Function's code holds: containers it
        # changes are its own business (an op's changes are replayed) and not watched.
        self.quiet, self.quiet_functions = 0, set()
        self.modules: list = []              # the user's modules reached
        self.relevant: dict[int, bool] = {}  # id -> whether it holds structure
        self.keep: list = []                 # keeps the ids above alive during the walk
        self.places: dict[int, str] = {}     # id(captured Variable) -> its shortest label
        # id -> the shortest label of each object walked; (label, id) of the objects
        # reached again by a shorter path (a model after the optimizer's target)
        self.labels, self.shorter = {}, []
        self.slot_tables: list = []          # (label, parameter, slot) of optimizers

    def visit(self, obj, label: str, inside: bool) -> bool:
        """Whether the graph's structure depends on obj being what it is (records
        the guards below it). inside: obj is held by a layer or an optimizer, where
        callable objects and containers count too."""
        if isinstance(obj, Variable):
            if id(obj) in self.captured and "<" not in label:  # not a repr of an object
                self.places[id(obj)] = min(label, self.places.get(id(obj), label), key=_rank)
            return id(obj) in self.captured
        # A global mask, model.mask; a layer's table that numpy reads (np.sum(self.table)).
        constant = self.constants.get(id(obj), _GONE) is obj
        if constant or inside and isinstance(obj, cuda.array_types):
            self.structure.arrays.append((obj, obj.copy(), label))
            return True
        if isinstance(obj, _ATOMS):
            return False
        if isinstance(obj, _CALLABLES):
            # A user's function, hook or activation (partial flattens nested partials).
            code = obj.func if isinstance(obj, functools.partial) else obj
            code = getattr(code, "__func__", code)
            if isinstance(code, types.FunctionType) and is_user_module(
                    sys.modules.get(code.__module__)):  # reads globals too, however reached
                self.add_function(obj)
            return True  # what it is counts: whoever holds it checks its identity
        key = id(obj)
        if key not in self.relevant:
            self.relevant[key] = False  # a cycle back here adds nothing
            self.keep.append(obj)
            self.labels[key] = label
            self.relevant[key] = self._walk(obj, label, inside)
        elif _rank(label) < _rank(self.labels[key]):
            self.shorter.append((self.labels[key], key))
            self.labels[key] = label
        # A class, module or container counts for what it holds; a callable held by
        # a layer or optimizer (a hook, an activation object) for what it is.
        return self.relevant[key] or (inside and callable(obj) and not isinstance(obj, type))

    def visit_unnamed(self, *objects):
        """Visit objects the code holds without a name (arguments, defaults, a bound
        self), each labelled by its type."""
        for obj in objects:
            self.visit(obj, type(obj).__name__, False)

    def bound(self, value, name):
        """A value a global or closure variable names: a function's code is surveyed
        whatever module it comes from, anything else visited."""
        if isinstance(value, types.FunctionType):
            self.add_function(value)
        elif isinstance(value, cuda.array_types):
            # numpy math on it (np.sum(mask)) records no node: watched as a layer's
            # array is, so that a change to its values retraces
            self.visit(value, name, True)
        else:
            self.visit(value, name, False)

    def _walk(self, obj, label, inside) -> bool:
        if isinstance(obj, _GENERATORS):
            self.structure.generators.append((obj, _generator_state(obj), label))
            return False
        if isinstance(obj, types.ModuleType):
            if is_user_module(obj):
                self.modules.append(obj)
            return is_user_module(obj) and self._mapping(obj.__dict__, obj, label, False)
        if isinstance(obj, type):
            if not is_user_module(sys.modules.get(obj.__module__)):
                return False
            # The methods of the user's classes (a Model's forward) read globals too;
            # their numbers (class Settings: scale = 2.0) count like an object's.
            for method in [v for v in vars(obj).values() if isinstance(v, types.FunctionType)]:
                self.add_function(method, quiet=issubclass(obj, Function))
            return self._mapping(obj.__dict__, obj, label, False, _NUMBERS)
        if not self.quiet and isinstance(obj, (dict, list, set, collections.deque)):
            self.structure.contents.append((obj, _items(obj), label))  # the user's
        if isinstance(obj, dict):  # settings = {"scale": 2.0}: its numbers count
            return self._mapping(obj, None, label, inside, _NUMBERS[:-1])
        if isinstance(obj, weakref.WeakKeyDictionary):  # an optimizer's slots, by parameter
            self.slot_tables += [(label, k, v) for k, v in list(obj.items())]
        if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
            found = [self._item(item, f"{label}[{i}]", inside) for i, item in enumerate(obj)]
            if isinstance(obj, list) and (any(found) or (inside and not obj)):
                # An empty list in a layer or optimizer (hooks) may get a hook later.
                self.structure.sequences.append((obj, tuple(obj), label))
            return any(found) or (inside and not obj)
        attributes = getattr(obj, "__dict__", None)
        if not isinstance(attributes, dict):
            return False
        if type(obj).__module__.startswith(__package__):
            # A traced function called from this one runs inline: its code counts. A
            # graph, entry or cache is not the user's structure.
            if callable(obj) and isinstance(getattr(obj, "fn", None), types.FunctionType):
                self.add_function(obj.fn)
            return False
        for klass in type(obj).__mro__:  # the user's classes: methods, class attributes
            self.visit(klass, klass.__name__, False)
        # dezero's objects (a layer, a DataLoader's iteration) and the user's: not
        # other libraries' internals (a WeakKeyDictionary's flags).
        users = is_user_module(sys.modules.get(type(obj).__module__))
        numbers = _NUMBERS if users or type(obj).__module__.split(".")[0] == "dezero" else ()
        # An optimizer's slots fill as it needs them: its containers are its own.
        self.quiet += (quiet := not users or isinstance(obj, Optimizer))
        found = self._mapping(attributes, obj, label,
                              inside or isinstance(obj, (Layer, Optimizer)), numbers)
        self.quiet -= quiet
        return found

    def add_function(self, f, quiet=False):
        self.functions.append(f)
        if quiet or self.quiet:
            self.quiet_functions.add(id(f))

    def _item(self, item, label, inside) -> bool:
        if self.computed_here(item):
            _refuse_carried(label, "a list, tuple or set")
        return self.visit(item, label, inside)

    def _mapping(self, mapping, holder, label, inside, numbers=()) -> bool:
        """Walk a namespace (holder's attributes) or a plain dict (holder None);
        numbers: the types of numbers and strings it holds that count too (None
        only for attributes: a dict of None is a layer's registry of names)."""
        bound, afresh = {}, _read_afresh(type(holder)) if numbers else ()
        for name, value in list(mapping.items()):
            sub = f"{label}.{_shown(holder, name)}" if holder is not None else \
                f"{label}[{name!r}]"
            if self.carried_value(holder, name, value, sub):
                continue
            # A class's methods count too: one rebound (Net.forward = f) is new code.
            if self.visit(value, sub, inside) or (isinstance(holder, type) and isinstance(
                    value, types.FunctionType)) or (isinstance(value, numbers)
                                                    and name not in afresh):
                bound[name] = value
        # Modules and classes gain names without changing the model; an object or a
        # dict that gains an entry may have gained a layer, parameter or slot.
        if bound or (inside and not mapping):
            counted = not isinstance(holder, (type, types.ModuleType))
            self.structure.add(mapping, bound, len(mapping) if counted else None, label,
                               "item" if holder is None else "attribute")
        return bool(bound) or (inside and not mapping)

    def carried_value(self, holder, name, value, label) -> bool:
        """True (and noted) if holder.name carries state: a Variable the run computed,
        or an attribute already read as carried state."""
        if isinstance(holder, Optimizer) and name in holder.per_update:
            self.transient.append(value)
            return True  # recomputed by each update before it is read
        if not self.computed_here(value):
            return holder is not None and (id(holder), name) in self.known
        if holder is None or not isinstance(name, str):
            _refuse_carried(label, "a dict")
        self.carried.append((holder, name, value))
        return True

    def computed_here(self, value) -> bool:
        return isinstance(value, Variable) and self.computed(value)


def _refuse_carried(label, container):
    raise TraceError(
        f"{label} holds a Variable computed in the traced run: state carried to the next "
        f"call in {container} cannot be replayed\n  fix: keep it as an attribute of a "
        f"Layer or object (self.h = h), or return it")
