"""StaticGraph: the graph users hold, an ir.Graph that runs, draws and saves itself.

Above ir.py and the modules that consume it (backends/, drawing.py, saving.py): the
tracer makes a StaticGraph, passes keep its class, and its methods are shortcuts to
those modules, so that ir.py stays data and printing.

    graph = step.graph; graph(x, t); print(graph.code); graph.plot("g.svg")
    graph.save("step.json"); graph = StaticGraph.load("step.json")
"""
from __future__ import annotations

from dezero import cuda
from dezero.core import TracedArray, Variable
from dezero.static import backends, drawing, passes, saving
from dezero.static.ir import Graph, Node
from dezero.static.lowering import check_input
from dezero.utils import render_dot

# =============================================================================
# StaticGraph: to_dot, plot, compile, code, run, devices, save/load
# =============================================================================


class StaticGraph(Graph):
    """A recorded computation users run and inspect: `graph(*inputs)` runs it on arrays
    or Variables given in the order of `input_names` (or by name), reads captured state afresh,
    applies the state writes and returns the structure the traced function returned.
    """

    def __init__(self, name: str, nodes: list[Node], out_tree):
        super().__init__(name, nodes, out_tree)
        self._compiled = {}  # backend name -> plan

    # ---- drawing ----------------------------------------------------------
    def to_dot(self) -> str:
        """DOT text: inputs green, captured state orange, constants grey, ops as
        boxes, the return a double octagon, state writes dashed orange nodes."""
        return drawing.graph_to_dot(self)

    def plot(self, to_file: str = "graph.png"):
        """Render the graph with Graphviz into to_file (format from the extension)."""
        return render_dot(self.to_dot(), to_file)

    # ---- running ----------------------------------------------------------
    def compile(self, backend: str | None = None):
        """The plan of the named backend (see backends/; None: the default for the
        graph's device), made on first use and kept (one plan per backend, however named)."""
        backend = backend or backends.default_backend(self)
        if backend not in self._compiled:
            self._compiled[backend] = backends.compile(self, backend)
        return self._compiled[backend]

    @property
    def program(self):
        """What a replay of the default backend runs, step by step (lowering.py):
        print(graph.program)."""
        return self.compile().program

    @property
    def code(self) -> str:
        """The generated Python replay code, as text (the python backend's where the
        default backend generates none: the interpreter)."""
        return getattr(self.compile(), "source", None) or self.compile("python").source

    def __call__(self, *inputs, **named):
        if named:
            inputs = self.arguments(*inputs, **named)
        values = self.input_values
        if len(inputs) != len(values):
            raise TypeError(f"graph {self.name} takes {len(values)} inputs "
                            f"({', '.join(self.input_names)}), got {len(inputs)}")
        for value, x in zip(values, inputs):
            data = x._data if isinstance(x, Variable) else x
            if isinstance(data, TracedArray):
                data = data.array  # called inside a trace: run() says why it refuses
            check_input(self.name, value, data)
        # (symbolic sizes: the plan reads them from the shapes and checks the relations)
        return self.compile().run(inputs)

    def arguments(self, *inputs, partial=False, **named) -> list:
        """The inputs in order from arrays by name (those given positionally first); an
        array of another dtype of its kind (float64 for float32) is converted."""
        names = self.input_names
        named = dict(zip(names, inputs)) | named
        for key in named:
            if key not in names:
                raise TypeError(f"graph {self.name} has no input {key}; its inputs are "
                                f"{', '.join(f'{v.name}: {v.type}' for v in self.input_values)}")
        missing = [v for v in self.input_values if v.name not in named]
        if missing and not partial:
            raise TypeError(f"graph {self.name}: no array for input "
                            f"{', '.join(f'{v.name} ({v.type})' for v in missing)}")
        args = []
        for value in self.input_values:
            data = named.get(value.name)
            if isinstance(data, cuda.array_types) and data.dtype != value.dtype and \
                    data.dtype.kind == value.dtype.kind:
                data = data.astype(value.dtype)
            if data is not None:
                check_input(self.name, value, data)
            args.append(data)
        return args

    def interpret(self, *inputs):
        """Run with the reference interpreter (slow, checked); same result as graph(*inputs)."""
        return self.compile("interpreter").run(inputs)

    # ---- devices ----------------------------------------------------------
    def to_gpu(self) -> StaticGraph:
        """Move constants (and state the graph owns, i.e. a loaded graph's) to the GPU.
        A traced graph's state belongs to its model: move the model too."""
        cuda.require_gpu(f"graph {self.name}: to_gpu()")
        return self._move(cuda.as_cupy, "gpu")

    def to_cpu(self) -> StaticGraph:
        return self._move(cuda.as_numpy, "cpu")

    def _move(self, convert, device):
        for node in self.nodes:
            if node.kind == "const":
                node.payload = convert(node.payload)
            elif node.kind == "state" and self.owns_state:
                node.payload.write(convert(node.payload.read()))
        self.device = device
        for group in self.groups:  # decided again for the device (measured anew on the CPU)
            passes.decide(group, device)
        self._compiled = {}  # compiled code closes over the old constants
        return self

    # ---- files ------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write path (.json) and its .npz of arrays; see dezero/static/saving.py."""
        saving.save(self, path)

    @staticmethod
    def load(path: str) -> StaticGraph:
        return saving.load(path, StaticGraph)



