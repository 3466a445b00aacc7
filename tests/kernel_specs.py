"""Kernel specs written by hand for the cpu backend's tests.

Param and KernelSpec mirror dezero/static/codegen.py's (the contract in the
fusion design); the cpu backend reads only their fields and key().
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

CTYPES = {"float32": "float", "float64": "double", "int64": "long long", "bool": "bool",
          "int32": "int"}


@dataclass(frozen=True)
class Param:
    name: str
    ctype: str
    dtype: str
    shape: tuple


@dataclass(frozen=True)
class KernelSpec:
    name: str
    inputs: tuple
    outputs: tuple
    shape: tuple
    body: str

    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()


def param(name, dtype, shape):
    return Param(name, CTYPES[dtype], dtype, tuple(shape))


def spec(name, inputs, outputs, shape, body):
    """KernelSpec from (name, dtype, shape) triples."""
    return KernelSpec(name, tuple(param(*p) for p in inputs),
                      tuple(param(*p) for p in outputs), tuple(shape), body)
