"""Step 78: automatic dynamic -- sizes become symbolic once they vary.

dezero.trace(f) records static shapes first, as before. When a later call differs
from a recording only in sizes (another batch size, another sequence length), its
recording makes exactly those dimensions symbolic, and that one graph serves every
later size: a loop over ten batch sizes keeps two graphs (the first, static, and
one of B), where a graph per shape (dynamic=False) keeps eight and runs the rest
eagerly. step.retraces says which dimensions became symbolic and why.

The same holds for a GPT generating text: each new token makes the context one
longer, and the traced forward replays one graph of symbolic length T for all of
them, giving generate()'s tokens.
Run: python steps/step78.py
"""
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.functions as F
from dezero import models, optimizers

x_all, t_all = dezero.datasets.get_spiral(train=True)
SIZES = (30, 17, 5, 64, 3, 29, 8, 50, 11, 2)   # ten batch sizes, the last batch of 2


def train(dynamic):
    """Trains on batches of SIZES with a traced step; (traced step, last loss)."""
    np.random.seed(0)
    model = models.MLP((10, 3))
    optimizer = optimizers.SGD(1.0).setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    traced = dezero.trace(step, dynamic=dynamic)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in range(100):
            for n in SIZES:
                index = rng.integers(0, len(x_all), n)
                loss = traced(x_all[index], t_all[index])
    for warning in caught[:1]:
        print("  warning:", str(warning.message).splitlines()[0])
    return traced, float(loss.data)


losses = []
for dynamic, name in ((False, "a graph per shape (dynamic=False)"),
                      (None, "automatic dynamic (the default)")):
    traced, loss = train(dynamic)
    losses.append(loss)
    print(f"{name}: {traced.entries} graphs kept, last loss {loss:.4f}")
print("the same training either way (to float32 rounding):",
      abs(losses[0] - losses[1]) <= 1e-5 * abs(losses[0]))
for reason in traced.retraces:
    print("  recorded:", reason)
print(traced.graph.nodes[0].outputs[0].type, "is the input of the graph that serves them all")

# ---- a GPT's growing context -------------------------------------------------------
np.random.seed(0)
gpt = models.GPT(vocab_size=20, block_size=32, n_layer=2, n_head=2, n_embd=16)
forward = dezero.trace(lambda ids: gpt(ids))


def generate(ids, steps, logits_of):
    """Greedy decoding: the most likely next token, appended, `steps` times."""
    for _ in range(steps):
        logits = logits_of(ids[:, -gpt.block_size:]).data[:, -1]
        ids = np.concatenate([ids, logits.argmax(axis=-1)[:, None]], axis=1)
    return ids


prompt = np.array([[1, 2, 3]])
with dezero.no_grad(), dezero.test_mode():
    traced = generate(prompt, 40, forward)      # records T = 3, then T symbolic
    eager = generate(prompt, 40, gpt)
    times = []
    for logits_of in (gpt, forward):            # timed again, nothing left to record
        start = time.perf_counter()
        generate(prompt, 40, logits_of)
        times.append(time.perf_counter() - start)
print(f"generated 40 tokens: the traced forward gives eager's tokens: "
      f"{np.array_equal(eager, traced)}; graphs recorded: {forward.entries}")
print(f"the symbolic graph takes {forward._symbolic[0].graph.nodes[0].outputs[0].type}")
print(f"time: eager {times[0] * 1e3:.0f} ms, traced {times[1] * 1e3:.0f} ms")
