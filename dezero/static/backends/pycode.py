"""Replay code: a StaticGraph compiled into Python source that calls forwards on arrays.

The fast backend (the interpreter in interpreter.py is its reference). One
assignment per node, names taken from the IR; each op is a Function instance
rebuilt from its attrs whose bound `forward` the code calls directly, so a replay
builds no Variable and no dynamic graph. `Compiled.run` reads captured state,
calls the code, applies state writes and rebuilds the outputs.

    print(graph.compile().source)
"""
from __future__ import annotations

import linecache

from dezero.core import Variable
from dezero.static.backends.interpreter import as_result_array, make_function, reraise
from dezero.static.ir import GraphError, StaticGraph, format_attr, identifier, read_slot

# =============================================================================
# Code generation: generate
# =============================================================================


def generate(graph: StaticGraph):
    """(source, globals, line -> node) for the replay function of `graph`."""
    fname = identifier(graph.name, "graph")
    params = [n.outputs[0].name for n in graph.nodes if n.kind in ("input", "state")]
    n_ops = sum(1 for n in graph.nodes if n.kind == "op")
    env = {"_arr": as_result_array}
    consts = [n.outputs[0].name for n in graph.nodes if n.kind == "const"]
    while fname in consts:  # constants are globals of the code: keep the def apart
        fname += "_"
    lines = [f"def {fname}({', '.join(params)}):  # generated from trace {graph.name}: "
             f"{n_ops} ops"]
    if consts:
        lines.append(f"    # constants (globals of this code): {', '.join(consts)}")
    line_nodes, counts, writes, returned = {}, {}, [], []
    for node in graph.nodes:
        if node.kind == "const":
            env[node.outputs[0].name] = node.payload
        elif node.kind == "op":
            base = identifier(node.op, "op")
            k = counts[base] = counts.get(base, -1) + 1
            callee = f"_{base}{k}"
            env[callee] = make_function(node).forward
            call = f"{callee}({', '.join(v.name for v in node.inputs)})"
            outs = [v.name for v in node.outputs]
            if len(outs) == 1 and node.outputs[0].shape == ():
                call = f"_arr({call})"  # numpy returns a scalar for a 0-d result
            text = f"    {', '.join(outs)} = {call}"
            if node.attrs:
                attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(node.attrs.items()))
                text = f"{text:<40}  # [{attrs}]"
            lines.append(text)
            line_nodes[len(lines)] = node
            for v in node.outputs if len(outs) > 1 else ():
                if v.shape == ():
                    lines.append(f"    {v.name} = _arr({v.name})")
                    line_nodes[len(lines)] = node
        elif node.kind == "write" and node.attrs["field"] == "attr":
            writes.append(node.inputs[0].name)
            lines.append(f"    # {node.attrs['of']}.{node.attrs['name']} <- {node.inputs[0].name}")
        elif node.kind == "write":
            target = node.inputs[0].name + (".grad" if node.attrs["field"] == "grad" else "")
            if len(node.inputs) > 1:
                writes.append(node.inputs[1].name)
                lines.append(f"    # {target} <- {node.inputs[1].name}")
            else:
                lines.append(f"    # {target} <- None")
        elif node.kind == "output":
            returned = [v.name for v in node.inputs]
    items = returned + writes
    lines.append(f"    return ({', '.join(items)}{',' if len(items) == 1 else ''})")
    return "\n".join(lines) + "\n", env, line_nodes, fname


# =============================================================================
# Compiled: compile_graph, run (read state, call, write state, build outputs)
# =============================================================================


def compile_graph(graph: StaticGraph) -> Compiled:
    return Compiled(graph)


class Compiled:
    """A graph's replay code plus the plan to feed it and to apply what it returns."""

    def __init__(self, graph: StaticGraph):
        self.graph = graph
        # A distinct pseudo-file per graph, registered with linecache, so that
        # tracebacks through the replay code show its source lines.
        self.filename = f"<replay {graph.name} {id(self):x}>"
        self.source, env, self.line_nodes, fname = generate(graph)
        code = compile(self.source, self.filename, "exec")
        exec(code, env)
        self.fn = env[fname]
        linecache.cache[self.filename] = (len(self.source), None,
                                          self.source.splitlines(True), self.filename)
        self.reads = [n.payload for n in graph.nodes if n.kind == "state"]
        inputs = {n.outputs[0].name: i for i, n in enumerate(graph.of_kind("input"))}
        slots = {n.outputs[0].name: n.payload for n in graph.nodes if n.kind == "state"}
        # (slot or input index, field, has a source) for each write, in order.
        self.writes = []
        for node in graph.of_kind("write"):
            name = node.inputs[0].name
            if node.attrs["field"] == "attr":
                # A loaded graph has no object to set (payload None): nothing to do.
                where = ("attr", (node.payload, node.attrs["name"]))
                self.writes.append((where, "attr", True))
                continue
            where = ("input", inputs[name]) if name in inputs else ("state", slots[name][0])
            self.writes.append((where, node.attrs["field"], len(node.inputs) > 1))
        self.n_out = len(graph.output_values)
        self.out_tree = graph.out_tree

    def __del__(self):
        linecache.cache.pop(getattr(self, "filename", None), None)

    def read_state(self):
        arrays = [var._data if field == "data" else read_slot(var, field)
                  for var, field in self.reads]
        if any(a is None for a in arrays):
            for (var, field), array in zip(self.reads, arrays):
                if array is None:
                    what = ".grad of " + (var.name or "a variable") if field == "grad" \
                        else f"{type(var).__name__}.{field[5:]}" if field != "data" \
                        else var.name or "a state variable"
                    raise GraphError(f"graph {self.graph.name} reads the {what}, which is "
                                     f"None now; it was set when the graph was traced")
        return arrays

    def run(self, leaves, runner=None):
        arrays = [x._data if isinstance(x, Variable) else x for x in leaves]
        if runner is not None:
            results = runner(*arrays, *self.read_state())
        else:
            try:
                results = self.fn(*arrays, *self.read_state())
            except Exception as e:  # noqa: BLE001 - re-raised with the node's line
                self._reraise(e)
        n = self.n_out
        k = n
        for (where, target), field, has_source in self.writes:
            value = None
            if has_source:
                value, k = results[k], k + 1
            if where == "input":
                target = leaves[target]
                if not isinstance(target, Variable):
                    continue  # an array argument has no .grad to receive
            if field == "attr":
                holder, name = target
                if holder is not None:
                    setattr(holder, name, Variable(value))
            elif field == "data":
                target.data = value
            else:
                target.grad = None if value is None else Variable(value)
        return build(self.out_tree, results)

    def _reraise(self, error):
        tb = error.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.filename:
                node = self.line_nodes.get(tb.tb_lineno)
                if node is not None:
                    reraise(error, node, self.graph.name)
            tb = tb.tb_next
        raise error


def build(tree, results):
    """Rebuild the structure the traced function returned from the flat results."""
    kind = tree[0]
    if kind == "var":
        return Variable(results[tree[1]])
    if kind == "array":
        return results[tree[1]]
    if kind == "tuple":
        return tuple(build(t, results) for t in tree[1])
    if kind == "list":
        return [build(t, results) for t in tree[1]]
    if kind == "dict":
        return {k: build(t, results) for k, t in tree[1]}
    return tree[1]  # "static": a Python value returned as is

