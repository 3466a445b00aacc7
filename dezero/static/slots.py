"""State slots: where the array a state node reads lives (DataSlot, GradSlot, AttrSlot).

The payload of a graph's state nodes (and of attribute writes): the tracer makes them
for the Variables a run captured, saving.py for the Variables a loaded graph owns, and
the backends read and write through them at every replay. Not part of the IR's text.

    slot = DataSlot(W); array = slot.read(); slot.write(array * 2)
"""
from __future__ import annotations

from dataclasses import dataclass

from dezero.core import Variable


@dataclass(eq=False)
class DataSlot:
    """var.data: a parameter, an optimizer slot, a running statistic."""

    var: Variable

    def read(self):
        return self.var._data

    def write(self, array) -> None:
        self.var._data = array

    def __str__(self):
        return self.var.name or "a state variable"


@dataclass(eq=False)
class GradSlot:
    """var.grad.data: a gradient that an earlier backward() left on var."""

    var: Variable

    def read(self):
        return None if self.var.grad is None else self.var.grad._data

    def write(self, array) -> None:
        self.var.grad = None if array is None else Variable(array)

    def __str__(self):
        return f".grad of {self.var.name or 'a variable'}"


@dataclass(eq=False)
class AttrSlot:
    """holder.<name>.data: a Variable an object keeps in a plain attribute (LSTM.h)."""

    holder: object
    name: str

    def read(self):
        var = getattr(self.holder, self.name, None)
        return var._data if isinstance(var, Variable) else None

    def write(self, array) -> None:
        setattr(self.holder, self.name, Variable(array))

    def __str__(self):
        return f"{type(self.holder).__name__}.{self.name}"
