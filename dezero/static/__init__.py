"""dezero.static: trace mode, define-and-run on top of define-by-run.

A traced function runs eagerly once per signature while every Function call is
recorded; the recording becomes a StaticGraph that later calls replay without
building Variables or a dynamic graph. The package reads as a pipeline:

    trace.py      trace(), TracedFunction: signatures, the cache, check=True
    tracer.py     records the Function calls of one run (core.TracerHooks, per thread)
    guard.py      what user code sees of a traced array while recording (GuardedArray)
    names.py      the names and literals generated code may hold (below ir)
    ir.py         Graph, Node, Value, Group: data, printing and check(); no consumer
    passes.py     graph -> graph: dce, cse, fold, simplify, split_epilogues, split_parts,
                  fuse (kernel groups)
    lowering.py   graph -> program: read, node or kernel, store, free, return
    backends/     program -> runnable: the reference interpreter, the replay code
    saving.py     the JSON + .npz file format; drawing.py the DOT pictures
    slots.py      where a state node's array lives (a Variable's .data, .grad, an attribute)
    graph.py      StaticGraph, the graph users hold: graph(x), .code, .plot(), .save()
Its errors (TraceError, GraphError, GraphFileError) and where() live in dezero/errors.py,
below all of it, so the eager library raises them without importing static/. The
kernel compiler, which turns each group into generated C++ or CUDA, is a package of
its own above this one (dezero/kernels/): static/ reads without it, and never
imports it; backends/__init__.py names its backends ("cpu", "cupy").

A tour. One training step of a linear regression, traced::

    W = Variable(np.zeros((3, 1), np.float32), name="W")
    b = Variable(np.zeros(1, np.float32), name="b")
    lr = Variable(np.array(0.1, np.float32), name="lr")

    @dezero.trace
    def step(x, t):
        loss = F.mean_squared_error(F.linear(x, W, b), t)
        W.cleargrad(); b.cleargrad()
        loss.backward()
        with dezero.no_grad():
            W.data = (W - lr * W.grad).data
            b.data = (b - lr * b.grad).data
        return loss

    step(x, t)            # records (and runs eagerly), returns the eager loss
    step(x, t)            # replays
    graph = step.lower(x, t)   # or step.graph: the latest recording

`print(graph)` shows one line per node, like a jaxpr. Inputs are the array
arguments; W, b and lr were made before the call, so they are captured state, read
afresh at every replay (change lr between steps and the replay sees it); the
backward pass is part of the graph; `.data` assignments became state writes and
the gradients backward() left are written back too. linear(x, W, b) became the
matrix product linear(x, W) and the bias add, which the fusion pass grouped with
the elementwise ops after it: chains of elementwise ops of one shape became
kernels (graph.groups), each indented under a comment that names what it
returns; k0 also sums the loss's gradient for b.grad in its loop (a reduction).
The same update of W and of b, neither waiting for the other, is one horizontal
kernel k1 with a segment per array (as an optimizer's fused multi-tensor apply).
Each kernel is "(to be measured)": on the CPU every kernel compiles in the
background, then is timed against its nodes as numpy calls, and the faster way
runs (the header then gives both times; DEZERO_KERNELS=always or never decides
without timing)::

    trace step(x: f32[8,3], t: f32[8,1]) captures W: f32[3,1], b: f32[1], lr: f32[]
      a: f32[] = const 0.25
      c: f32[8,1] = linear(x, W)
      # kernel k0: 4 ops, reduces axes (0,) of [8, 1] -> d, g, j (to be measured)
        d: f32[8,1] = add(c, b)
        f: f32[8,1] = sub(d, t)
        g: f32[8,1] = mul(f, a)
        j: f32[1] = sum_to(g) [shape=(1,)]
      e: f32[] = mean_squared_error(d, t)
      h: f32[3,8] = transpose(x) [axes=None]
      i: f32[3,1] = matmul(h, g)
      # kernel k1: horizontal, 2 x 2 ops over [3,1], [1] (to be measured)
        # k1_0: f32[3,1] -> l
        k: f32[3,1] = mul(lr, i)
        l: f32[3,1] = sub(W, k)
        # k1_1: f32[1] -> n
        m: f32[1] = mul(lr, j)
        n: f32[1] = sub(b, m)
      W <- l
      b <- n
      W.grad <- i
      b.grad <- j
      return e

After fusion the graph is lowered once into a program (lowering.py), the steps a
replay runs in order: read the state, run a node or a kernel (a kernel measured
slower than its nodes runs them), store each new .data and .grad as soon as it is computed,
free each array after its last reader (as eager code does), return. Every backend
runs this one program; `print(graph.program)`::

    program step(x: f32[8,3], t: f32[8,1])
      W: f32[3,1] = state
      b: f32[1] = state
      lr: f32[] = state
      c: f32[8,1] = linear(x, W)
      d: f32[8,1], g: f32[8,1], j: f32[1] = k0(c, b, t, a)  # 4 ops, to be measured
        d: f32[8,1] = add(c, b)
        free c
        f: f32[8,1] = sub(d, t)
        g: f32[8,1] = mul(f, a)
        free f
        j: f32[1] = sum_to(g) [shape=(1,)]
      store b.grad <- j
      e: f32[] = mean_squared_error(d, t)
      free d
      h: f32[3,8] = transpose(x) [axes=None]
      i: f32[3,1] = matmul(h, g)
      store W.grad <- i
      free g, h
      l: f32[3,1], n: f32[1] = k1(lr, i, W, j, b)  # 4 ops, to be measured
        k: f32[3,1] = mul(lr, i)
        free i
        l: f32[3,1] = sub(W, k)
        free W, k
        m: f32[1] = mul(lr, j)
        free j
        n: f32[1] = sub(b, m)
        free b, m
      store W <- l
      store b <- n
      return e

`graph.code` is the program printed as Python: one line per step, simple ops
spelled inline, the others calling their Function's forward on arrays (`_s_W` is
the Variable W)::

    def step(x, t):  # generated from trace step: 12 ops
        # constants (globals of this code): a
        x = x._data if _isinstance(x, _Variable) else x
        t = t._data if _isinstance(t, _Variable) else t
        W = _s_W._data
        b = _s_b._data
        lr = _s_lr._data
        c = x @ W
        d = c + b
        del c
        f = d - t
        g = f * a
        del f
        j = _sum(g, axis=(0,))
        _s_b.grad = _wrap(j)  # b.grad <- j
        e = _arr(_mean_squared_error0(d, t))
        del d
        h = x.T
        i = h @ g
        _s_W.grad = _wrap(i)  # W.grad <- i
        del g, h
        k = lr * i
        del i
        l = W - k
        del W, k
        m = lr * j
        del j
        n = b - m
        del b, m
        _s_W._data = l  # W <- l
        _s_b._data = n  # b <- n
        return _outputs((e,))

A kernel backend runs each group as one generated kernel instead; the C++ body
of a segment (dezero.kernels.codegen.kernel_spec(graph.groups[1]).segments[0].body) computes one
element, with a local per node and the values read outside assigned last (`i` is
cupy's loop index, so a value of that name is `v_i` in a kernel)::

    // kernel k1_0: mul, sub
    const float k = lr * v_i;
    const float l_ = W - k;
    l = l_;

Values in a trace: arguments are inputs; Variables made outside and read inside
are captured by reference, and named by where the function reaches them (W above,
a global; model.l0.W for the W of an MLP's first layer, model.l0, by the shortest
path; optimizer.ms[l0.W] for the Adam moment of that parameter, optimizer.t for its
step count; generated code calls them model_l0_W, optimizer_ms_l0_W, optimizer_t);
Python scalars and literal arrays made inside are constants; random ops (dropout
masks) draw afresh at every replay; values that a layer keeps in an attribute
between calls (LSTM.h) are carried state. Branching in Python on a traced value
(bool(), float(), int(), .item()) raises TraceError naming the line; shapes and
dtypes are fine to branch on. While recording, `.data` and array arguments are
guards: arithmetic on them is recorded (so the book's `W.data -= lr * W.grad.data`
is a state write), reading their numbers raises.

The signature of a call: shapes, dtypes and devices of array arguments, values
of the others (static_argnames=...), Config.train and Config.enable_backprop,
and the types of captured state. Each new signature is recorded (DEZERO_DEBUG=1
or `with dezero.static.debug(1):` says why); at most max_entries are kept.

Debug ladder (DEZERO_DEBUG or debug(level)): 1 traces and retraces with reasons
and kernel counts; 2 each replay's time and bytes; 3 what each pass did (why a
node is no part of a kernel, why kernels were split) and the IR checks; 4 the
replay code and kernel sources; 5 the IR before and after every pass.

Glossary: graph (a StaticGraph), node (one step of it), value (an array flowing
between nodes), op (a registered Function name), attrs (an op's fixed arguments),
state (captured Variables), write (a state update, a store step of the program),
program (the steps of a replay, lowering.py), signature (what selects a recorded
graph), guard (a traced array as user code sees it while recording), replay guard
(what a replay checks of captured state before it runs: trace.StateType, GradUnset,
NotShared, each with check() and explain()), op record (the facts about an op,
dezero/op_record.py), group or kernel (elementwise nodes that run as one generated
loop).
"""
from dezero.errors import GraphError, GraphFileError, TraceError
from dezero.static.debugging import debug
from dezero.static.graph import StaticGraph
from dezero.static.ir import Node, Value
from dezero.static.passes import cse, dce, fold, fuse, optimize
from dezero.static.trace import TracedFunction, trace

load = StaticGraph.load

__all__ = ["trace", "TracedFunction", "TraceError", "GraphError", "GraphFileError",
           "StaticGraph", "Node", "Value", "debug", "load", "dce", "cse", "fold", "fuse",
           "optimize"]
