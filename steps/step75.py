"""Step 75: a character-level GPT, trained for a few minutes and sampled.

Everything of steps 72-74 in one model, models.GPT: each character id becomes a
vector (a token embedding plus a position embedding), goes through n_layer
transformer blocks, and leaves as scores for the next character, read out
through the token embedding again (tied weights). The loss is the cross entropy
of every position's prediction at once: logits (B, T, vocab) against the
characters that follow (B, T). The text is CharText's default, the source of a
few modules of Python's own library (read offline); the training is what
small GPTs use: AdamW with weight decay on the matrices, the learning rate
warmed up then decayed along a cosine (schedules), and the gradients' norm
clipped to 1. A first loss near ln(vocab) means guessing uniformly; the
validation loss, on the last 10% of the text, says whether the model learns
Python or memorises it. Then model.generate samples characters one at a time.
The loss curve is saved as a picture. Step 76 traces this training step.
Run: python steps/step75.py   (1500 steps: minutes; DEZERO_STEPS_QUICK=1: seconds)
"""
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero
import dezero.functions as F
from dezero import optimizers, schedules
from dezero.datasets import CharText
from dezero.models import GPT
from dezero.utils import clip_grad_norm

# The tests run the steps with DEZERO_STEPS_QUICK=1: a smaller model, a few steps.
QUICK = os.environ.get("DEZERO_STEPS_QUICK") == "1"
if QUICK:
    n_layer, n_head, n_embd, block_size, batch_size, iters, every = 2, 4, 32, 32, 16, 60, 20
else:
    n_layer, n_head, n_embd, block_size, batch_size, iters, every = 2, 4, 64, 64, 32, 1500, 100
warmup = iters // 15

np.random.seed(0)
train, val = CharText(block_size=block_size), CharText(block_size=block_size, train=False)
print(f"text: {len(train.ids):,} characters to train on, {len(val.ids):,} to validate; "
      f"vocabulary of {train.vocab_size}")
model = GPT(train.vocab_size, block_size, n_layer, n_head, n_embd)
print(f"GPT: {n_layer} blocks of {n_head} heads, n_embd {n_embd}, context {block_size}: "
      f"{sum(p.size for p in model.params()):,} parameters")

optimizer = optimizers.AdamW(alpha=3e-3, weight_decay=0.1).setup(model)
schedule = schedules.LinearWarmup(optimizer, warmup, then=schedules.CosineDecay(
    optimizer, epochs=iters - warmup, min_factor=0.1))


def train_step(x, t):
    loss = F.softmax_cross_entropy(model(x), t)       # (B, T, V) against (B, T)
    model.cleargrads()
    loss.backward()
    clip_grad_norm(model, max_norm=1.0)
    optimizer.update()
    return loss


rng = np.random.default_rng(0)
val_x, val_t = val.get_batch(64, rng)                # the same windows at every check


def val_loss():
    with dezero.no_grad(), dezero.test_mode():
        return float(F.softmax_cross_entropy(model(val_x), val_t).data)


print(f"uniform guessing: loss ln({train.vocab_size}) = {math.log(train.vocab_size):.3f}")
losses, checks = [], []
start = time.perf_counter()
for i in range(iters + 1):
    x, t = train.get_batch(batch_size, rng)
    lr = optimizer.alpha
    losses.append(float(train_step(x, t).data))
    schedule.step()                                    # one "epoch" of the schedule a step
    if i % every == 0:
        checks.append((i, val_loss()))
        print(f"iter {i:4d}: train loss {losses[-1]:.3f}, val loss {checks[-1][1]:.3f}, "
              f"lr {lr:.2e}")
seconds = time.perf_counter() - start
print(f"trained {iters + 1} steps in {seconds:.1f} s "
      f"({seconds / (iters + 1) * 1e3:.0f} ms a step, validation included)")

prompt = "def "
ids = model.generate(train.encode(prompt)[None], max_new_tokens=80 if QUICK else 400,
                     temperature=0.8, rng=0)
print(f"generated sample (temperature 0.8), from {prompt!r}:")
print("-" * 60)
print(train.decode(ids[0]))
print("-" * 60)

plt = pyplot()
if plt is not None:
    plt.figure(figsize=(7, 4))
    plt.plot(losses, alpha=0.4, label="train (each step's batch)")
    plt.plot(*zip(*checks), "o-", label="validation")
    plt.axhline(math.log(train.vocab_size), ls=":", color="gray", label="uniform guess")
    plt.xlabel("step")
    plt.ylabel("cross entropy (nats a character)")
    plt.legend()
    plt.savefig("gpt_loss.png")
    print("plot saved to gpt_loss.png")
