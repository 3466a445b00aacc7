"""Step 72: attention from scratch -- every position reads the others, weighted by a softmax.

A recurrent network (steps 59-60) carries the past in one hidden state, passed
from step to step. Attention lets each position look at every position directly.
Each position t makes a query q_t, a key k_t and a value v_t (three matrices times
its vector); the score of t for position s is q_t . k_s / sqrt(d), how well s
answers t's question; a softmax over s turns the scores into weights that sum to
one, and t's output is the weighted mean of the values. For a language model
position t may not see the future: a causal mask sets the scores of s > t to
-inf, whose exp is 0. Written here with matmul, where and softmax, it equals
F.scaled_dot_product_attention. Then one attention layer learns a task that needs
it, copying the token one position back; the picture shows its weights before
and after training: from spread over the past to the diagonal just below the main one.
Run: python steps/step72.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero.functions as F
import dezero.layers as L
from dezero import Model, optimizers


def attention(q, k, v, causal=False):
    """softmax(q k^T / sqrt(d)) v for q, k, v of shape (..., T, d)."""
    d = q.shape[-1]
    scores = F.matmul(q, F.transpose(k, (*range(k.ndim - 2), -1, -2))) / np.sqrt(d)
    if causal:
        T = scores.shape[-1]
        sees = np.tril(np.ones((T, T), dtype=bool))   # row t: True for s <= t
        scores = F.where(sees, scores, -np.inf)
    weights = F.softmax(scores, axis=-1)              # each row sums to 1
    return F.matmul(weights, v), weights


# =============================================================================
# One head by hand: queries, keys, values, scores, weights
# =============================================================================
rng = np.random.default_rng(0)
T, d = 5, 4
x = rng.standard_normal((T, d)).astype(np.float32)      # 5 positions of 4 features
Wq, Wk, Wv = (rng.standard_normal((d, d)).astype(np.float32) for _ in range(3))
q, k, v = F.matmul(x, Wq), F.matmul(x, Wk), F.matmul(x, Wv)
y, weights = attention(q, k, v, causal=True)
np.set_printoptions(precision=3, suppress=True)
print(f"causal attention weights ({T} queries x {T} keys):\n{weights.data}")
print(f"rows sum to 1: {np.allclose(weights.data.sum(axis=-1), 1)}; "
      f"above the diagonal all 0: {not np.triu(weights.data, 1).any()}")
library = F.scaled_dot_product_attention(q, k, v, is_causal=True)
print(f"the same as F.scaled_dot_product_attention: "
      f"{np.allclose(y.data, library.data, atol=1e-6)}")


# =============================================================================
# A task that needs attention: at each position, say the token one place back
# =============================================================================
class OneHead(Model):
    """Token and position embeddings, one causal attention head, a linear read-out."""

    def __init__(self, vocab, T, d):
        super().__init__()
        self.tok, self.pos = L.EmbedID(vocab, d), L.EmbedID(T, d)
        self.q, self.k, self.v = (L.Linear(d, nobias=True, in_size=d) for _ in range(3))
        self.out = L.Linear(vocab, in_size=d)

    def forward(self, ids):
        h = self.tok(ids) + self.pos(np.arange(ids.shape[1]))   # (B, T, d)
        y, weights = attention(self.q(h), self.k(h), self.v(h), causal=True)
        return self.out(y), weights


def batch(n):
    ids = rng.integers(0, vocab, (n, T))
    previous = np.concatenate([np.full((n, 1), -1), ids[:, :-1]], axis=1)
    return ids, previous      # position 0 has no previous token: label -1, left out


np.random.seed(0)
vocab, T, d = 10, 8, 16
model = OneHead(vocab, T, d)
optimizer = optimizers.Adam(alpha=0.01).setup(model)
example, _ = batch(1)
_, before = model(example)
for i in range(201):
    ids, previous = batch(64)
    logits, weights = model(ids)
    loss = F.softmax_cross_entropy(logits, previous, ignore_index=-1)
    model.cleargrads()
    loss.backward()
    optimizer.update()
    if i % 100 == 0:
        print(f"iter {i}: loss {float(loss.data):.4f}")

ids, previous = batch(500)
logits, weights = model(ids)
said = logits.data.argmax(axis=-1)
print(f"accuracy of the previous token (positions 1-{T - 1}): "
      f"{(said[:, 1:] == previous[:, 1:]).mean():.3f}")
below = np.diagonal(weights.data, offset=-1, axis1=1, axis2=2)   # weight of t on t - 1
print(f"mean weight on the position one back: {below.mean():.3f} "
      f"(at the start: {np.diagonal(before.data, offset=-1, axis1=1, axis2=2).mean():.3f})")

plt = pyplot()
if plt is not None:
    _, after = model(example)
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, w, title in ((axes[0], before, "before training"), (axes[1], after, "after")):
        image = ax.imshow(w.data[0], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"attention weights, {title}")
        ax.set_xticks(range(T), [str(t) for t in example[0]])
        ax.set_yticks(range(T), [str(t) for t in example[0]])
        ax.set_xlabel("key (the token read)")
        ax.set_ylabel("query (the position reading)")
    fig.colorbar(image, ax=axes, shrink=0.8)
    plt.savefig("attention_weights.png")
    print("plot saved to attention_weights.png")
