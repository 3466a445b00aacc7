"""dezero.static: trace mode (define-and-run on top of define-by-run).

Pipeline: trace.py (TracedFunction) -> tracer.py (records one run) -> ir.py
(StaticGraph) -> passes.py (dce, cse, fold) -> backends/ (interpreter, replay code).
"""
from dezero.static.debugging import debug
from dezero.static.ir import GraphError, Node, StaticGraph, TraceError, Value
from dezero.static.passes import cse, dce, fold, optimize
from dezero.static.saving import GraphFileError
from dezero.static.trace import TracedFunction, trace

load = StaticGraph.load

__all__ = ["trace", "TracedFunction", "TraceError", "GraphError", "GraphFileError",
           "StaticGraph", "Node", "Value", "debug", "load", "dce", "cse", "fold", "optimize"]
