"""dezero.static: trace mode, define-and-run on top of define-by-run.

A traced function runs eagerly once per signature while every Function call is
recorded; the recording becomes a StaticGraph that later calls replay without
building Variables or a dynamic graph. The package reads as a pipeline:

    trace.py      trace(), TracedFunction: signatures, the cache, check=True
    tracer.py     records the Function calls of one run (core.TracerHooks, per thread)
    guard.py      what user code sees of a traced array while recording (GuardedArray)
    names.py      the names and literals generated code may hold (below ir)
    ir.py         Graph, Node, Value, Group: data, printing and check(); no consumer
    passes.py     graph -> graph: dce, cse, fold, simplify, fuse (kernel groups)
    codegen.py    a fused group -> a kernel spec: typed params and a C++ body
    lowering.py   graph -> program: read, node or kernel, store, free, return
    backends/     the reference interpreter, the generated replay code, cupy kernels
    saving.py     the JSON + .npz file format; drawing.py the DOT pictures
    slots.py      where a state node's array lives (a Variable's .data, .grad, an attribute)
    graph.py      StaticGraph, the graph users hold: graph(x), .code, .plot(), .save()
Its errors (TraceError, GraphError, GraphFileError) and where() live in dezero/errors.py,
below all of it, so the eager library raises them without importing static/.

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
the gradients backward() left are written back too. The fusion pass grouped
chains of elementwise ops of one shape into kernels (graph.groups), each indented
under a comment that names what it returns; a kernel too small to pay for its call
on the CPU (under 4 ops and 16384 elements) says it runs as numpy calls. The same
update of W and of b, neither waiting for the other, is one horizontal kernel k1
with a segment per array (as an optimizer's fused multi-tensor apply)::

    trace step(x: f32[8,3], t: f32[8,1]) captures W: f32[3,1], b: f32[1], lr: f32[]
      a: f32[] = const 0.25
      c: f32[8,1] = linear(x, W, b)
      d: f32[] = mean_squared_error(c, t)
      # kernel k0: 2 ops -> f (numpy calls: too small to pay for a kernel)
        e: f32[8,1] = sub(c, t)
        f: f32[8,1] = mul(e, a)
      g: f32[3,8] = transpose(x) [axes=None]
      h: f32[3,1] = matmul(g, f)
      i: f32[1] = sum_to(f) [shape=(1,)]
      # kernel k1: horizontal, 2 x 2 ops over [3,1], [1]
        # k1_0: f32[3,1] -> k
        j: f32[3,1] = mul(lr, h)
        k: f32[3,1] = sub(W, j)
        # k1_1: f32[1] -> m
        l: f32[1] = mul(lr, i)
        m: f32[1] = sub(b, l)
      W <- k
      b <- m
      W.grad <- h
      b.grad <- i
      return d

After fusion the graph is lowered once into a program (lowering.py), the steps a
replay runs in order: read the state, run a node or a kernel (a kernel too small
to pay runs its nodes), store each new .data and .grad as soon as it is computed,
free each array after its last reader (as eager code does), return. Every backend
runs this one program; `print(graph.program)`::

    program step(x: f32[8,3], t: f32[8,1])
      W: f32[3,1] = state
      b: f32[1] = state
      lr: f32[] = state
      c: f32[8,1] = linear(x, W, b)
      d: f32[] = mean_squared_error(c, t)
      f: f32[8,1] = k0(c, t, a)  # 2 ops, as numpy calls
        e: f32[8,1] = sub(c, t)
        free c
        f: f32[8,1] = mul(e, a)
        free e
      g: f32[3,8] = transpose(x) [axes=None]
      h: f32[3,1] = matmul(g, f)
      store W.grad <- h
      free g
      i: f32[1] = sum_to(f) [shape=(1,)]
      store b.grad <- i
      free f
      k: f32[3,1], m: f32[1] = k1(lr, h, W, i, b)  # 4 ops, compiled
        j: f32[3,1] = mul(lr, h)
        free h
        k: f32[3,1] = sub(W, j)
        free W, j
        l: f32[1] = mul(lr, i)
        free i
        m: f32[1] = sub(b, l)
        free b, l
      store W <- k
      store b <- m
      return d

`graph.code` is the program printed as Python: one line per step, simple ops
spelled inline, the others calling their Function's forward on arrays (`_s_W` is
the Variable W)::

    def step(x, t):  # generated from trace step: 11 ops
        # constants (globals of this code): a
        x = x._data if _isinstance(x, _Variable) else x
        t = t._data if _isinstance(t, _Variable) else t
        W = _s_W._data
        b = _s_b._data
        lr = _s_lr._data
        c = x @ W + b
        d = _arr(_mean_squared_error0(c, t))
        e = c - t
        del c
        f = e * a
        del e
        g = x.T
        h = g @ f
        _s_W.grad = _wrap(h)  # W.grad <- h
        del g
        i = _sum(f, axis=(0,))
        _s_b.grad = _wrap(i)  # b.grad <- i
        del f
        j = lr * h
        del h
        k = W - j
        del W, j
        l = lr * i
        del i
        m = b - l
        del b, l
        _s_W._data = k  # W <- k
        _s_b._data = m  # b <- m
        return _outputs((d,))

A kernel backend runs each group as one generated kernel instead; the C++ body
of a segment (codegen.kernel_spec(graph.groups[1]).segments[1].body) computes one
element, with a local per node and the values read outside assigned last (`i` is
cupy's loop index, so a value of that name is `v_i` in a kernel)::

    // kernel k1_1: mul, sub
    const float l = lr * v_i;
    const float m_ = b - l;
    m = m_;

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
