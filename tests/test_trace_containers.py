"""Containers a traced function takes and returns, against eager on every backend:
namedtuples (of any length, nested), OrderedDict and defaultdict, lists of
Variables and nested None come back as eager returns them, on the first call and
on replays. Containers whose rebuilding would be guesswork (other subclasses of
tuple, list and dict, dataclasses) are refused naming the line, and a graph file,
which names no Python type, refuses to save what it cannot return as it is."""
import dataclasses
from collections import OrderedDict, defaultdict, namedtuple
from typing import NamedTuple

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.errors import GraphFileError
from dezero.static import TraceError

P1 = namedtuple("P1", "a")
P2 = namedtuple("P2", "a b")
P3 = namedtuple("P3", "a b c")


class Typed(NamedTuple):
    loss: Variable
    count: int = 0


OUTPUTS = {
    "namedtuple of 1": lambda y, z: P1(y),
    "namedtuple of 2": lambda y, z: P2(y, z),
    "namedtuple of 3 with an array": lambda y, z: P3(y, z.data, 7),
    "typing.NamedTuple": lambda y, z: Typed(y, 3),
    "nested in dicts and lists": lambda y, z: {"out": P2(y, [P1(z), None]), "n": [P3(y, z, None)]},
    "OrderedDict in its order": lambda y, z: OrderedDict([("z", z), ("y", P2(y, z))]),
    "defaultdict": lambda y, z: defaultdict(list, {"y": y, "zs": [z, z * 2]}),
    "list of Variables": lambda y, z: [y, z, y * z],
    "nested None": lambda y, z: (None, [None, {"k": None}], y, ()),
}


def assert_same(got, want):
    """got is want's type all the way down, with want's values."""
    assert type(got) is type(want), (got, want)
    if isinstance(want, Variable):
        np.testing.assert_allclose(got.data, want.data, rtol=1e-5, atol=1e-6)
    elif isinstance(want, np.ndarray):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    elif isinstance(want, dict):
        assert list(got) == list(want)
        assert getattr(got, "default_factory", None) is getattr(want, "default_factory", None)
        for key in want:
            assert_same(got[key], want[key])
    elif isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_same(g, w)
    else:
        assert got == want


@pytest.fixture(params=["python", "interpreter", "cpu"])
def backend(request, monkeypatch):
    from dezero.static import backends
    monkeypatch.setattr(backends, "DEFAULT", request.param)
    return request.param


@pytest.mark.parametrize("case", OUTPUTS)
def test_returned_containers_keep_their_type_on_the_first_call_and_replays(backend, case):
    build = OUTPUTS[case]

    def f(x):
        return build(F.tanh(x) * 2.0, F.exp(x) + x)

    traced = dezero.trace(f)
    for i in range(4):
        x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3) * (i + 1)
        assert_same(traced(x), f(x))
    assert traced.entries == 1


ARGUMENTS = {
    "namedtuple of arrays": lambda x, t: P2(x, t),
    "namedtuple of Variables": lambda x, t: P2(Variable(x), Variable(t)),
    "typing.NamedTuple with a static count": lambda x, t: Typed(Variable(x), 2),
    "OrderedDict": lambda x, t: OrderedDict([("b", t), ("a", x)]),
    "defaultdict": lambda x, t: defaultdict(int, {"a": x, "b": t}),
}


def loss_of(batch):
    a, b = (batch.a, batch.b) if isinstance(batch, P2) else \
        (batch.loss, batch.count) if isinstance(batch, Typed) else (batch["a"], batch["b"])
    return P2(F.sum(a * b), F.tanh(a))


@pytest.mark.parametrize("case", ARGUMENTS)
def test_container_arguments_are_inputs_not_frozen(backend, case):
    make = ARGUMENTS[case]
    traced = dezero.trace(loss_of)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x, t = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
        assert_same(traced(make(x, t)), loss_of(make(x, t)))
    assert traced.entries == 1


class Pair(tuple):
    pass


class Bag(dict):
    pass


class Items(list):
    pass


@dataclasses.dataclass
class Result:
    loss: Variable


@pytest.mark.parametrize("make", [Pair, Items, Bag, Result],
                         ids=["tuple subclass", "list subclass", "dict subclass", "dataclass"])
def test_containers_that_cannot_be_rebuilt_are_refused_naming_the_line(make):
    def f(x):
        y = F.tanh(x)
        return make({"y": y}) if make is Bag else make(y) if make is Result else make([y])

    x = np.ones((2, 3), np.float32)
    assert type(f(x)) is make  # eager
    with pytest.raises(TraceError, match=rf"returns a {make.__name__}.*"
                                         r"test_trace_containers.py:\d+, `traced\(x\)`"
                                         r"[\s\S]*fix: return .*namedtuple"):
        traced = dezero.trace(f)
        traced(x)


def test_a_graph_file_refuses_a_namedtuple_it_could_not_return(tmp_path):
    traced = dezero.trace(lambda x: {"p": P2(F.tanh(x), x * 2.0)})
    x = np.ones((2, 3), np.float32)
    graph = traced.lower(x)
    with pytest.raises(GraphFileError, match=r"cannot save graph <lambda>: it returns a P2"
                                             r"[\s\S]*fix: return tuple\(\.\.\.\)"):
        graph.save(str(tmp_path / "g"))
    assert not (tmp_path / "g.json").exists()
