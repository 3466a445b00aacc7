"""DOT drawings of a StaticGraph (the dynamic graph's are in dezero.utils).

Beside ir.py: StaticGraph.to_dot() and .plot() call graph_to_dot. Inputs are green
ellipses, captured state orange, constants grey, ops boxes, outputs double
octagons, and state writes dashed red edges back to the state they update.

    graph.plot("step.svg")
"""
from dezero.static.ir import StaticGraph, format_attr

# =============================================================================
# DOT text: graph_to_dot
# =============================================================================

_STYLE = {
    "input": 'shape=ellipse, style=filled, fillcolor="#c8e6c9"',
    "state": 'shape=ellipse, style=filled, fillcolor="#ffcc80"',
    "const": 'shape=ellipse, style=filled, fillcolor="#e0e0e0", fontsize=10',
    "value": "shape=ellipse",
    "op": 'shape=box, style=filled, fillcolor="#bbdefb"',
    "output": 'shape=doubleoctagon, style=filled, fillcolor="#fff59d"',
}


def graph_to_dot(graph: StaticGraph) -> str:
    lines = [f'digraph "{graph.name}" {{', "  rankdir=TB;"]
    for i, node in enumerate(graph.nodes):
        if node.kind in ("input", "state", "const"):
            v = node.outputs[0]
            label = f"{v.name}: {v.type}"
            if node.kind == "state" and node.attrs.get("field") == "grad":
                label += f"\\n({node.attrs['of']}.grad)"
            lines.append(f'  "{v.name}" [label="{label}", {_STYLE[node.kind]}];')
        elif node.kind == "op":
            attrs = ", ".join(f"{k}={format_attr(a)}" for k, a in sorted(node.attrs.items()))
            label = node.op + (f"\\n[{attrs}]" if attrs else "")
            label = label.replace('"', '\\"')
            lines.append(f'  "op{i}" [label="{label}", {_STYLE["op"]}];')
            for v in node.inputs:
                lines.append(f'  "{v.name}" -> "op{i}";')
            for v in node.outputs:
                lines.append(f'  "{v.name}" [label="{v.name}: {v.type}", {_STYLE["value"]}];')
                lines.append(f'  "op{i}" -> "{v.name}";')
        elif node.kind == "write" and node.attrs["field"] == "attr":
            target = f"{node.attrs['of']}.{node.attrs['name']}"
            lines.append(f'  "{target}" [shape=note, style=filled, fillcolor="#ffcc80"];')
            lines.append(f'  "{node.inputs[0].name}" -> "{target}" [style=dashed, color=red];')
        elif node.kind == "write":
            target = node.inputs[0].name
            label = "grad" if node.attrs["field"] == "grad" else "data"
            source = node.inputs[1].name if len(node.inputs) > 1 else None
            if source is not None:
                lines.append(f'  "{source}" -> "{target}" [style=dashed, color=red, '
                             f'label="{label}", constraint=false];')
        elif node.kind == "output":
            lines.append(f'  "return" [label="return", {_STYLE["output"]}];')
            for k, v in enumerate(node.inputs):
                lines.append(f'  "{v.name}" -> "return" [label="{k}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"
