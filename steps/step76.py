"""Step 76: the GPT training step traced -- its static graph, its kernels, eager against fused.

Step 75 trained eagerly: every step made some nine hundred Function calls
(forward, backward, clipping, update), each making Variables and linking them into
the dynamic graph that backward walks. Traced
(steps 61-70), the same step is recorded once: forward, backward, the clipping and
AdamW's update of every parameter become one static graph, whose elementwise
chains and row reductions fuse into kernels. In a transformer the fusion pass
finds: each layer norm, with the residual addition before it, as one kernel over
rows; the softmax of the attention weights; GELU with its bias; the loss and its
gradient; and AdamW's updates of all the parameters merged into a horizontal kernel.
Matmuls, reshapes and transposes are boundaries. This step prints the graph's
summary and a slice of it, the kernels and the C++ of two of them, then times the
step three ways from the same weights (eager, replayed op by op, replayed with the
fused kernels) and checks that the replays give eager's losses. The times are
this machine's, as measured when the step runs.
Run: python steps/step76.py   (DEZERO_STEPS_QUICK=1: a smaller model, fewer steps)
"""
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.datasets import CharText
from dezero.kernels import cpu
from dezero.kernels.codegen import kernel_spec
from dezero.models import GPT
from dezero.utils import clip_grad_norm

QUICK = os.environ.get("DEZERO_STEPS_QUICK") == "1"   # the tests' setting
if QUICK:
    n_layer, n_head, n_embd, block_size, batch_size, timed_steps = 2, 4, 32, 32, 16, 4
else:   # step 75's model and batch
    n_layer, n_head, n_embd, block_size, batch_size, timed_steps = 2, 4, 64, 64, 32, 20

text = CharText(block_size=block_size)
rng = np.random.default_rng(0)
batches = [text.get_batch(batch_size, rng) for _ in range(timed_steps + 2)]


def make_training():
    """A GPT with the same initial weights at every call, AdamW, and its step."""
    np.random.seed(0)
    model = GPT(text.vocab_size, block_size, n_layer, n_head, n_embd)
    optimizer = optimizers.AdamW(alpha=3e-3, weight_decay=0.1).setup(model)

    def train_step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        clip_grad_norm(model, max_norm=1.0)
        optimizer.update()
        return loss

    return train_step


# =============================================================================
# Record: one eager call, every Function call seen
# =============================================================================
traced = dezero.trace(make_training())
start = time.perf_counter()
traced(*batches[0])
print(f"recorded the step in {time.perf_counter() - start:.2f} s (one eager call, traced)")
graph = traced.graph
ops = graph.of_kind("op")
kinds = Counter(n.kind for n in graph.nodes)
print(f"the graph: {len(graph.nodes)} nodes: " + ", ".join(f"{k} {c}" for k, c in kinds.items()))
print(f"  {len(ops)} ops, {sum(n.record.elementwise for n in ops)} elementwise, in "
      f"{len(graph.groups)} kernels; the most frequent ops: " +
      ", ".join(f"{op} {c}" for op, c in Counter(n.op for n in ops).most_common(6)))
print(f"  captured state: {kinds['state']} values (weights, AdamW's moments and rates), "
      f"written back: {kinds['write']}")

lines = str(graph).splitlines()
print(lines[0][:150] + " ...")
first = next(i for i, line in enumerate(lines) if "= split(" in line)   # block 0's attention
_, mixed = [i for i in range(first, len(lines)) if "= matmul(" in lines[i]][:2]
print("the first block's attention, from its qkv Linear to weights @ v:")
print("\n".join(lines[first - 2:mixed + 1]))

# =============================================================================
# The kernels: each group's header, then the C++ of two of them
# =============================================================================
print(f"the first 6 of the {len(graph.groups)} kernels, in the graph's order:")
for group in graph.groups[:6]:
    print("  " + group.header())
print(f"  ... and {len(graph.groups) - 6} more, of which the last: "
      f"{graph.groups[-1].header()}")


def group_with(op):
    return next(g for g in graph.groups if any(n.op == op for n in g.nodes))


gelu = kernel_spec(group_with("tanh"))
print(f"GELU with its bias and what its backward needs, kernel {gelu.name} as the cpu "
      f"backend writes it (the header dezero_kernels.h writes the loops):")
print(cpu.kernel_source(gelu).strip())
norm = kernel_spec(graph.groups[0])
source = cpu.kernel_source(norm)
print(f"the first layer norm (with the embeddings' sum), kernel {norm.name}: one loop "
      f"over the {norm.shape[0]} x {norm.shape[1]} positions, three passes over each row "
      f"of {norm.shape[-1]} (its mean, its variance, the normalised row):")
print(source[source.index("  for (npy_intp _k = 0"):].rstrip())


# =============================================================================
# Eager, replayed op by op, replayed fused: the same losses, and the time of each
# =============================================================================
def per_step(step):
    """ms a step over batches[2:], after one call outside the clock; its losses."""
    losses = [float(step(*batches[1]).data)]
    start = time.perf_counter()
    for x, t in batches[2:]:
        losses.append(float(step(x, t).data))
    return (time.perf_counter() - start) / (len(batches) - 2) * 1e3, losses


def replay(backend):
    """A fresh training's step, recorded on batches[0], as a plan of `backend`."""
    step = dezero.trace(make_training())
    step(*batches[0])
    return step.graph.compile(backend).wait()  # wait: a library not in the cache compiles


eager_step = make_training()
eager_step(*batches[0])
ways = {"eager": eager_step, "replayed op by op (python)": replay("python")}
missing = cpu.missing_reason()
if missing is None:
    start = time.perf_counter()
    ways["replayed fused (cpu)"] = graph.compile("cpu").wait()   # the step recorded above
    print(f"compiled the kernels (or found them in the cache) in "
          f"{time.perf_counter() - start:.1f} s")
else:
    print(f"skipped the fused replay: {missing}")
results = {name: per_step(step) for name, step in ways.items()}
eager_ms, eager_losses = results["eager"]
print(f"{timed_steps} training steps of a batch of {batch_size} x {block_size} characters, "
      f"from the same weights:")
for name, (ms, losses) in results.items():
    gap = np.max(np.abs(np.array(losses) - eager_losses) / np.array(eager_losses))
    print(f"  {name:28s} {ms:8.1f} ms a step ({eager_ms / ms:.2f}x eager's speed), "
          f"losses {losses[0]:.4f} ... {losses[-1]:.4f}, at most {gap:.1e} from eager's")
print("the replays give eager's losses (to float32 rounding): " + str(all(
    np.allclose(losses, eager_losses, rtol=1e-3) for _, losses in results.values())))
