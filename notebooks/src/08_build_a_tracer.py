# %% [markdown]
# # 08 · Build a tracer yourself
#
# Notebook 07 used `dezero.trace` as a black box. Here we build a tiny tracer
# from scratch — about forty lines — to see that there is no magic: a trace is a
# list of the Function calls that ran, and a replay calls the same ops again on new
# arrays. At the end, we look at one computation three ways: as a dynamic graph, as
# a static graph, and as the source of a fused kernel.
#
# ## The hook
#
# dezero's core has one hook for this. `dezero.core.set_tracer(obj)` installs, for
# the current thread, an object that the core informs of what it does. The
# interface is declared in `dezero.core.TracerHooks`; its defaults do nothing, so
# a tracer overrides only the events it cares about:
#
# | method | called when |
# |---|---|
# | `record(f, inputs, outputs)` | a Function `f` has just run |
# | `created(v, data)` | a Variable is made with `Variable(data)` |
# | `assigned(v, value)` | someone writes `v.data = value` |
# | `concretized(v, how)` | someone reads a value into Python: `float(v)`, `bool(v)`, `v.item()` |
# | `backward_step(f)` | `backward()` is about to run `f.backward` |
#
# Everything else — the arithmetic, `backward()`, the optimizer — runs exactly as
# usual. The tracer only watches.

# %%
import inspect

import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.core import OPS, TracerHooks, set_tracer


class TinyTracer(TracerHooks):
    """Records each Function call as a node: (outputs, op name, input names, attrs)."""

    def __init__(self):
        self.names = {}        # id(Variable) -> its name in the listing
        self.types = {}        # name -> (shape, dtype)
        self.inputs, self.nodes, self.constants = [], [], {}
        self.keep = []         # keep the Variables alive, so that their ids stay unique
        self.count = 0         # numbers the values the recorded ops make: t0, t1, ...

    def _name(self, v, name):
        self.names[id(v)] = name
        self.types[name] = (v.data.shape, v.data.dtype)
        self.keep.append(v)
        return name

    def add_input(self, v):
        self.inputs.append(self._name(v, f"x{len(self.inputs)}"))

    def name_of(self, v):
        if id(v) not in self.names:
            # Neither an input nor made by a recorded op: its value is baked in.
            name = self._name(v, f"k{len(self.constants)}")
            self.constants[name] = v.data
        return self.names[id(v)]

    def record(self, f, inputs, outputs):
        ins = [self.name_of(x) for x in inputs]
        outs = []
        for y in outputs:
            outs.append(self._name(y, f"t{self.count}"))
            self.count += 1
        self.nodes.append((outs, f.op_name, ins, f.attrs))

    def assigned(self, v, value):
        raise NotImplementedError("this tiny tracer does not record state writes")

    def concretized(self, v, how):
        name = self.names.get(id(v))
        if name is not None and name not in self.constants:
            raise RuntimeError(f"{how} of the traced value {name}: the trace could "
                               f"not repeat this decision")

# %% [markdown]
# Tracing a function means: wrap the arrays in Variables, register them as inputs,
# install the tracer, run the function, uninstall the tracer.

# %%
def tiny_trace(fn, *arrays):
    tracer = TinyTracer()
    xs = [Variable(a) for a in arrays]
    for x in xs:
        tracer.add_input(x)
    previous = set_tracer(tracer)
    try:
        y = fn(*xs)
    finally:
        set_tracer(previous)
    tracer.output = tracer.name_of(y)
    return tracer


def show(tracer):
    def typed(n):
        shape, dtype = tracer.types[n]
        return f"{n}: {dtype}{list(shape)}"
    print(f"trace({', '.join(typed(n) for n in tracer.inputs)})")
    for name, value in tracer.constants.items():
        print(f"  {typed(name)} = const {np.array2string(np.asarray(value), threshold=4)}")
    for outs, op, ins, attrs in tracer.nodes:
        extra = f"  {attrs}" if attrs else ""
        print(f"  {', '.join(typed(n) for n in outs)} = {op}({', '.join(ins)}){extra}")
    print(f"  return {tracer.output}")


def layer(x, W, b):
    y = F.tanh(F.matmul(x, W) + b)
    return F.sum(y * y)


rng = np.random.default_rng(0)
x = rng.standard_normal((4, 3)).astype(np.float32)
W = rng.standard_normal((3, 5)).astype(np.float32)
b = np.zeros(5, np.float32)
tracer = tiny_trace(layer, x, W, b)
show(tracer)

# %% [markdown]
# That is a static graph: a list of typed nodes in the order they ran.
#
# ## Replaying
#
# Each node names its op and its attributes. Because every dezero Function keeps
# its constructor arguments under the same names (`f.attrs`), `OPS[name](**attrs)`
# rebuilds an equivalent op, and its `forward` computes on plain arrays. A replay
# is one loop over the nodes — no Variables, no graph links, no Python from
# `layer` itself:

# %%
def replay(tracer, *arrays):
    env = dict(tracer.constants)
    env.update(zip(tracer.inputs, arrays))
    for outs, op, ins, attrs in tracer.nodes:
        ys = OPS[op](**attrs).forward(*[env[n] for n in ins])
        env.update(zip(outs, ys if isinstance(ys, tuple) else (ys,)))
    return env[tracer.output]


x2 = rng.standard_normal((4, 3)).astype(np.float32)
print("replay:", replay(tracer, x2, W, b))
print("eager :", layer(Variable(x2), Variable(W), Variable(b)).data)

# %% [markdown]
# ## Gradients are just more nodes
#
# If the traced function calls `backward()`, the ops that backward runs are
# Function calls like any other, so they are recorded too. The trace of "loss and
# gradient" is a longer list — and replaying it computes the gradient without
# walking any graph:

# %%
def grad_of_layer(x, W, b):
    loss = layer(x, W, b)
    loss.backward()
    return W.grad


grad_tracer = tiny_trace(grad_of_layer, x, W, b)
show(grad_tracer)

# %%
Wv = Variable(W)
layer(Variable(x2), Wv, Variable(b)).backward()
print("same gradient:", np.allclose(replay(grad_tracer, x2, W, b), Wv.grad.data))

# %% [markdown]
# Look at the constants first: the gradient seed `1` that `backward()` starts
# from, and the `1` in tanh's derivative `1 - y²`, became `k0` and `k1` — values
# made outside any recorded op, baked into the trace.
#
# The listing is also wasteful, in two ways that a static graph makes easy to
# spot. Some nodes repeat an earlier node exactly (same op, same inputs, same
# attributes), and some compute values that never reach the result: the
# gradients of `x` and `b`, which backward computes anyway, and even the loss
# itself, since the function returns only `W`'s gradient. Two tiny passes find
# them:

# %%
def twins(tracer):
    """Nodes that repeat an earlier node: common-subexpression elimination merges them."""
    first, found = {}, []
    for outs, op, ins, attrs in tracer.nodes:
        key = (op, tuple(ins), repr(sorted(attrs.items())))
        if key in first:
            found.append(f"{outs[0]} repeats {first[key]}")
        else:
            first[key] = outs[0]
    return found


def dead(tracer):
    """Nodes whose outputs never reach the result: dead-code elimination drops them."""
    live, found = {tracer.output}, []
    for outs, op, ins, attrs in reversed(tracer.nodes):
        if live.intersection(outs):
            live.update(ins)
        else:
            found.append(outs[0])
    return sorted(found, key=lambda n: int(n[1:]))


print("twins:", twins(grad_tracer))
print("dead :", dead(grad_tracer))

# %% [markdown]
# `dezero.trace` runs passes like these (`cse`, `dce`, and constant folding) on
# every graph it records. It also bakes in literals as we do, but treats
# Variables that existed *before* the call (a model's weights) differently: it
# captures them by reference and reads them afresh at every replay, so that
# training can change them.
#
# ## What a trace cannot see
#
# Python decisions on values are not ops, so they are not recorded. Our
# `concretized` hook refuses them, like `dezero.trace` does:

# %%
def careful(x):
    y = F.sum(x)
    return y * 2 if float(y) > 0 else y


try:
    tiny_trace(careful, x)
except RuntimeError as e:
    print("RuntimeError:", e)

# %% [markdown]
# ## Three views of one computation
#
# **1. The dynamic graph** exists because one call ran (notebook 01).
# **2. The static graph** is the listing above. **3. Fused kernels** are what a
# compiler makes of it. Look at the nodes of `layer` between `matmul` and `sum`:
# `add`, `tanh`, `mul` all work element by element on arrays of one shape. Run one
# by one, each reads its inputs from memory and writes a new array back. A
# **fusion** pass merges such a chain into one loop that reads `a` and `b` once and
# writes only the final result.
#
# Every elementwise dezero op carries the C expression for one element, `cpp`,
# whose placeholders are the names of `forward`'s parameters:

# %%
for op in ["add", "mul", "tanh", "sigmoid", "leaky_relu"]:
    print(f"{op:11s} forward{inspect.signature(OPS[op].forward)}  cpp = {OPS[op].cpp!r}")

# %% [markdown]
# That is enough to write the body of the fused loop, one statement per node:

# %%
def kernel_source(tracer):
    """C++ source of the first chain of consecutive elementwise nodes (one shape)."""
    chain = []
    for node in tracer.nodes:
        outs, op, ins, attrs = node
        fits = OPS[op].cpp is not None and (
            not chain or tracer.types[outs[0]][0] == tracer.types[chain[0][0][0]][0])
        if fits:
            chain.append(node)
        elif chain:
            break
    made = {n for outs, *_ in chain for n in outs}
    reads = sorted({n for _, _, ins, _ in chain for n in ins if n not in made})
    lines = [f"// fused: {', '.join(op for _, op, _, _ in chain)}",
             f"// reads {', '.join(reads)}; broadcast inputs are indexed by strides",
             "for (i = 0; i < n; i++) {"]
    for outs, op, ins, attrs in chain:
        params = list(inspect.signature(OPS[op].forward).parameters)[1:]
        slots = {p: (f"{n}[i]" if n not in made else n) for p, n in zip(params, ins)}
        lines.append(f"    const float {outs[0]} = {OPS[op].cpp.format(**slots, **attrs)};")
    lines += [f"    out[i] = {chain[-1][0][0]};", "}"]
    return "\n".join(lines)


print(kernel_source(tracer))

# %% [markdown]
# Three ops, one loop, no intermediate arrays in memory. Compiled with a C++
# compiler on the CPU, or handed to cupy's `ElementwiseKernel` on a GPU, this is
# where much of a static graph's speed comes from. dezero's trace mode does this
# with its `fuse` pass and the cpu and cupy backends: notebook 09 shows the
# kernels of a whole training step, steps 66-68 build them one at a time.
#
# Finally, compare our tiny tracer with the real one on the same function:

# %%
real = dezero.trace(layer)
real(Variable(x), Variable(W), Variable(b))
print(real.graph)

# %% [markdown]
# The same nodes, with nicer names. What the real tracer adds: captured state and
# state writes (so a training step can be traced), signatures and retracing,
# dead-code elimination and the other passes, generated replay code, checks,
# drawing and saving.
#
# ## Summary
#
# * A tracer is an observer: the core tells it about every Function call.
# * A trace is the list of calls; `OPS[op](**attrs).forward(...)` replays one.
# * `backward()` and optimizer updates are Function calls too, so they trace.
# * Elementwise ops carry a C expression, from which fused kernels are written.
