# %% [markdown]
# # 10 · A GPT from scratch, three ways
#
# Notebook 09 followed one training step of a small classifier three ways. Here the
# model is a **GPT**: a character-level language model made of attention, layer
# norms, GELU and a loss over every position (steps 72-75 build each piece). We
# write its heart, attention, from scratch, then look at the model's training step
# the same three ways:
#
# 1. the **dynamic graph** that define-by-run builds at every call,
# 2. the **static graph** that `dezero.trace` records once,
# 3. the **fused kernels** that the fusion pass makes of it, with their C++,
#
# and time the step each way. The model is tiny, so that everything runs in
# seconds; step 75 trains a larger one for a few minutes.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.datasets import CharText
from dezero.kernels import cpu
from dezero.kernels.codegen import kernel_spec
from dezero.models import GPT
from dezero.utils import clip_grad_norm, plot_dot_graph

# %% [markdown]
# ## Attention from scratch
#
# Each position makes a query, a key and a value; the weights of position t are a
# softmax over its query's dot products with the keys of positions up to t (the
# causal mask), and its output is the weighted mean of those positions' values.
# Three positions of two features, written with matmul, where and softmax:

# %%
def attention(q, k, v):
    T, d = q.shape[-2:]
    scores = F.matmul(q, F.transpose(k)) / np.sqrt(d)
    scores = F.where(np.tri(T, dtype=bool), scores, -np.inf)   # no looking ahead
    return F.matmul(F.softmax(scores, axis=-1), v)


rng = np.random.default_rng(0)
q, k, v = (Variable(rng.standard_normal((3, 2)).astype(np.float32), name=name)
           for name in "qkv")
y = attention(q, k, v)
print(y.data)
print("the same as F.scaled_dot_product_attention:",
      np.allclose(y.data, F.scaled_dot_product_attention(q, k, v, is_causal=True).data))

# %% [markdown]
# ## View 1: the dynamic graph
#
# Calling `attention` computed the result *and* linked a graph of Variables and
# Functions, which `backward()` walks from the loss back to q, k and v:

# %%
loss = F.sum(y * y)
loss.name = "loss"
loss.backward()
plot_dot_graph(loss, verbose=False, to_file="graphs/10_attention_dynamic.svg")

# %% [markdown]
# A GPT links such a graph for every head of every block, plus the layer norms,
# the MLPs and the loss. Here is a one-block GPT on the characters of
# `CharText`'s default text (the source of a few modules of Python's library),
# trained with AdamW and clipped gradients. `make_training` gives the same
# initial weights at every call, so the three ways below start alike.

# %%
text = CharText(block_size=16)
batches = [text.get_batch(8, rng) for _ in range(40)]


def make_training():
    np.random.seed(0)
    model = GPT(text.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16)
    optimizer = optimizers.AdamW(alpha=1e-2, weight_decay=0.1).setup(model)

    def train_step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)    # logits (8, 16, 95), t (8, 16)
        model.cleargrads()
        loss.backward()
        clip_grad_norm(model, max_norm=1.0)
        optimizer.update()
        return loss

    return model, train_step


model, train_step = make_training()
x, t = batches[0]
loss = F.softmax_cross_entropy(model(x), t)


def functions_in(output):
    """The Functions of the dynamic graph behind `output`."""
    seen, todo = set(), [output.creator]
    while todo:
        f = todo.pop()
        if f is not None and f not in seen:
            seen.add(f)
            todo.extend(x.creator for x in f.inputs)
    return seen


print(f"{model}".splitlines()[0])
print(f"the forward pass alone links {len(functions_in(loss))} Functions; "
      f"every training step builds them anew")

# %% [markdown]
# ## View 2: the static graph
#
# Traced, a function runs once while every Function call is recorded into a
# static graph: typed values, one line per op. The attention above, traced with
# its loss and backward:

# %%
def attention_loss(q, k, v):
    y = attention(q, k, v)
    return F.sum(y * y)


small = dezero.trace(attention_loss).lower(q.data, k.data, v.data)
print(small)

# %% [markdown]
# Drawn, with captured values and constants as their own nodes. The Softmax box of
# the dynamic graph is here its steps (a max, a subtraction, exp, a sum, a
# quotient), framed as kernel k0: on the CPU the passes split it so that one
# kernel computes it in passes over each row.

# %%
small.plot(to_file="graphs/10_attention_static.svg")

# %% [markdown]
# The GPT's whole training step, traced: forward, backward, the clipping and
# AdamW's update, with the weights and the optimizer's moments as captured state
# and their new values as state writes. Too long to draw legibly; its summary and
# the first block's attention:

# %%
model, train_step = make_training()
traced_step = dezero.trace(train_step)
traced_step(*batches[0])                 # records, and takes the first step
graph = traced_step.graph
kinds = {}
for node in graph.nodes:
    kinds[node.kind] = kinds.get(node.kind, 0) + 1
print(f"{len(graph.nodes)} nodes: {kinds}")
lines = str(graph).splitlines()
first = next(i for i, line in enumerate(lines) if "= split(" in line)
print("\n".join(lines[first:first + 22]))

# %% [markdown]
# ## View 3: the fused kernels
#
# The fusion pass groups elementwise ops whose results share one shape, and rows
# of reductions (a layer norm's mean and variance, a softmax's max and sum) with
# the elementwise ops around them, into kernels. Matmuls, reshapes and transposes
# are boundaries. In the slice above, `# kernel k1` is the softmax of the
# attention weights. Each kernel's header ("to be measured": once the kernels are
# compiled, the CPU backend times each against its ops run as numpy calls and
# keeps the faster way, as notebook 09 shows):

# %%
for group in graph.groups:
    print(group.header()[:150])

# %% [markdown]
# The softmax kernel as the CPU backend writes it: for each row, a pass for the
# max, one for the sum of the exponentials, one for the quotients. The backend
# compiles all kernels into one library with the system C++ compiler (in the
# background; `wait()` waits for it) and caches it on disk.

# %%
softmax = next(g for g in graph.groups if any(n.op == "exp" for n in g.nodes))
source = cpu.kernel_source(kernel_spec(softmax))
print(source[source.index("  for (npy_intp _k = 0"):])

# %% [markdown]
# ## Three ways, timed
#
# The same 30 training steps from the same weights: **eager** (the dynamic graph
# built and walked at every step), **replayed op by op** (the static graph's
# Python replay code, one numpy call per node) and **replayed fused** (the same
# code with the kernels compiled). The numbers are this machine's, measured now;
# which way is fastest depends on the machine, its load and the model's size.

# %%
def run(way):
    """Seconds a step over batches[2:32] and every loss, from fresh weights."""
    _, step = make_training()
    if way != "eager":
        traced = dezero.trace(step)
        traced(*batches[0])                         # records
        step = traced.graph.compile(way).wait()     # a plan: step(x, t) replays
    else:
        step(*batches[0])
    losses = [float(step(*batches[1]).data)]        # warm up outside the clock
    start = time.perf_counter()
    for x, t in batches[2:32]:
        losses.append(float(step(x, t).data))
    return (time.perf_counter() - start) / 30, losses


ways = {"eager": "eager", "replayed op by op": "python"}
if cpu.missing_reason() is None:
    ways["replayed fused"] = "cpu"
timings = {}
for name, way in ways.items():
    timings[name], losses = run(way)
    print(f"{name:18s} {timings[name] * 1e3:6.2f} ms a step   losses {losses[0]:.4f} ... "
          f"{losses[-1]:.4f}")

# %%
fig, ax = plt.subplots(figsize=(6, 2))
ax.barh(list(timings), [s * 1e3 for s in timings.values()])
ax.invert_yaxis()
ax.set_xlabel("milliseconds a training step")
plt.show()

# %% [markdown]
# The losses agree (to float32 rounding): one computation, run three ways.
# Replaying removes define-by-run's Python work (making Variables and Functions,
# linking them, walking them backward); fusing replaces chains of numpy calls,
# each writing a temporary array, by loops that read each array once. How much
# each saves here is what the times above say; step 76 times the same step for a
# larger GPT.
#
# Last, a model trained by the traced step (40 steps), sampled one character at a time
# (so few steps teach it little more than which characters are common):

# %%
model, step = make_training()
traced = dezero.trace(step)
for x, t in batches:
    traced(x, t)
ids = model.generate(text.encode("def ")[None], max_new_tokens=60, rng=0)
print(repr(text.decode(ids[0])))
