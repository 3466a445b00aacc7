"""DOT drawings of a static graph (the dynamic graph's are in dezero.utils).

Above ir.py: graph.py's StaticGraph.to_dot() and .plot() call graph_to_dot. Inputs
are green ellipses, captured state orange, constants grey, ops boxes, collectives (an
allreduce across processes) purple hexagons, outputs double octagons, and state
writes dashed orange nodes fed by dashed red edges; each fused kernel (graph.groups)
is a dashed cluster labelled with its name.

    graph.plot("step.svg")
"""
from dezero.static.ir import Graph, format_attr, stored, written
from dezero.utils import escape_dot

# =============================================================================
# DOT text: graph_to_dot
# =============================================================================

_STYLE = {
    "input": 'shape=ellipse, style=filled, fillcolor="#c8e6c9"',
    "state": 'shape=ellipse, style=filled, fillcolor="#ffcc80"',
    "const": 'shape=ellipse, style=filled, fillcolor="#e0e0e0", fontsize=10',
    "value": "shape=ellipse",
    "op": 'shape=box, style=filled, fillcolor="#bbdefb"',
    "collective": 'shape=hexagon, style="filled,bold", fillcolor="#e1bee7", color="#6a1b9a"',
    "output": 'shape=doubleoctagon, style=filled, fillcolor="#fff59d"',
    "write": 'shape=ellipse, style="filled,dashed", color=red, fillcolor="#ffcc80"',
}


def graph_to_dot(graph: Graph) -> str:
    # The name may come from a file: escaped, it stays inside its quotes.
    lines = [f'digraph "{escape_dot(graph.name)}" {{', "  rankdir=TB;"]
    for i, node in enumerate(graph.nodes):
        if node.kind in ("input", "state", "const"):
            v = node.outputs[0]
            label = f"{escape_dot(v.label)}: {v.type}"
            if node.kind == "state" and node.attrs.get("field") == "grad" and not v.place:
                label += f"\\n({escape_dot(node.attrs['of'])}.grad)"
            lines.append(f'  "{v.name}" [label="{label}", {_STYLE[node.kind]}];')
        elif node.kind == "op":
            attrs = ", ".join(f"{k}={format_attr(a)}" for k, a in sorted(node.attrs.items()))
            label = node.op + (f"\\n[{escape_dot(attrs)}]" if attrs else "")
            style = _STYLE["collective" if node.record.collective else "op"]
            lines.append(f'  "op{i}" [label="{label}", {style}];')
            for v in node.inputs:
                lines.append(f'  "{v.name}" -> "op{i}";')
            for v in node.outputs:
                lines.append(f'  "{v.name}" [label="{v}", {_STYLE["value"]}];')
                lines.append(f'  "op{i}" -> "{v.name}";')
        elif node.kind == "write":
            # A write gets its own node at the bottom (not an edge back up to the
            # state it updates), so the drawing keeps flowing downwards.
            target, source = written(node, in_place=False), stored(node)
            lines.append(f'  "write{i}" [label="{escape_dot(target)} <-", {_STYLE["write"]}];')
            if source is not None:
                lines.append(f'  "{source.name}" -> "write{i}" [style=dashed, color=red];')
        elif node.kind == "output":
            lines.append(f'  "return" [label="return", {_STYLE["output"]}];')
            for k, v in enumerate(node.inputs):
                lines.append(f'  "{v.name}" -> "return" [label="{k}"];')
    lines += _clusters(graph)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _clusters(graph: Graph) -> list[str]:
    """One cluster per kernel: its op boxes and the values they make, framed and
    labelled with the kernel's name (naming a node in a subgraph moves it there); a
    horizontal kernel frames its segments, each a dotted cluster of its own."""
    at = {id(n): i for i, n in enumerate(graph.nodes)}

    def cluster(group, label, style, inside):
        return (f'subgraph cluster_{group.name} {{ label="{label}"; style="{style}"; '
                f'color="#1565c0"; {"; ".join(inside)}; }}')

    def members(group):
        return [f'"op{at[id(n)]}"' for n in group.nodes] + \
            [f'"{v.name}"' for n in group.nodes for v in n.outputs]
    return ["  " + (cluster(g, g.name, "rounded,dashed", members(g)) if not g.segments else
                    cluster(g, f"{g.name}: horizontal", "rounded,bold", [
                        cluster(s, s.name, "rounded,dotted", members(s)) for s in g.segments]))
            for g in graph.groups]
