"""Step 25: the DOT language, the way graphs get drawn (theory).

Graphviz draws a graph from a text description in its DOT language: one line
per node (`id [label="x", color=orange, style=filled]`) and one per edge
(`a -> b`). Step 26 generates this text from a computational graph; here it
is written by hand for y = exp(x) and rendered with Graphviz's `dot`.
Read: the DOT language guide at graphviz.org (documentation, "DOT Language").
Run: python steps/step25.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dezero.utils import GraphvizNotFoundError, render_dot

# Variables are orange ellipses, functions blue boxes: the convention of step 26.
dot_text = """digraph g {
x [label="x", color=orange, style=filled]
y [label="y", color=orange, style=filled]
exp [label="Exp", color=lightblue, style=filled, shape=box]
x -> exp
exp -> y
}
"""
print(dot_text)

render_dot(dot_text, "sample.dot")  # the text itself needs no Graphviz
print("DOT text saved to sample.dot (render it with: dot sample.dot -T png -o sample.png)")
try:
    render_dot(dot_text, "sample.png")
    print("graph saved to sample.png")
except GraphvizNotFoundError as e:
    print(f"skipped drawing sample.png: {e}")
