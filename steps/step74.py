"""Step 74: one transformer block -- attention and an MLP, each on a normalised copy, added back.

A GPT is a stack of identical blocks over a (batch, time, features) array, the
"residual stream". Each block reads the stream twice and adds what it computes:
x = x + attn(ln1(x)), where positions exchange information (several heads of step
72's attention side by side, each on its own slice of the features), then
x = x + mlp(ln2(x)), where each position computes alone (a Linear 4x wider, step
73's GELU, a Linear back). The layer norms come first (pre-norm, as GPT-2), and
the additions let the gradient reach early blocks undiminished. Here the block is
written out with F's functions on the weights of an L.TransformerBlock, and
equals it; the causal mask keeps each position blind to the ones after it; and a
stack of blocks passes the gradient down with its residual additions, and far
less of it without them.
Run: python steps/step74.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero.functions as F
import dezero.layers as L
from dezero import Variable


def attention(x, attn, show=None):
    """Multi-head causal self-attention with the weights of an L.MultiHeadAttention."""
    B, T, C = x.shape
    H = attn.n_head
    qkv = F.linear(x, attn.qkv.W, attn.qkv.b)            # queries, keys, values at once

    def heads(z):                                         # (B, T, C) -> (B, H, T, C // H)
        return F.transpose(F.reshape(z, (B, T, H, C // H)), (0, 2, 1, 3))

    q, k, v = (heads(z) for z in F.split(qkv, 3, axis=-1))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)   # step 72's, per head
    merged = F.reshape(F.transpose(y, (0, 2, 1, 3)), (B, T, C))   # heads side by side
    if show:
        show(f"  attention: qkv {qkv.shape} -> q, k, v {q.shape} ({H} heads of "
             f"{C // H}) -> heads' outputs {y.shape} -> merged {merged.shape}")
    return F.linear(merged, attn.proj.W, attn.proj.b)


def mlp(x, m, show=None):
    h = F.gelu(F.linear(x, m.fc.W, m.fc.b), approximate="tanh")
    if show:
        show(f"  mlp: {x.shape} -> hidden {h.shape} -> {x.shape}")
    return F.linear(h, m.proj.W, m.proj.b)


def block_forward(x, block, residual=True, show=None):
    a = attention(F.layer_norm(x, block.ln1.gamma, block.ln1.beta), block.attn, show)
    x = x + a if residual else a
    m = mlp(F.layer_norm(x, block.ln2.gamma, block.ln2.beta), block.mlp, show)
    return x + m if residual else m


np.random.seed(0)
B, T, C, H = 2, 6, 16, 2
block = L.TransformerBlock(n_embd=C, n_head=H)
print(block)
x = np.random.randn(B, T, C).astype(np.float32)
y = block_forward(x, block, show=print)
print(f"block output {y.shape}, the shape of its input: a block can follow a block")
print(f"the same as L.TransformerBlock: {np.allclose(y.data, block(x).data, atol=1e-5)}")

# The causal mask: changing the last position's input changes no earlier output.
x2 = x.copy()
x2[:, -1] += 1.0
y2 = block(x2)
same = np.allclose(y.data[:, :-1], y2.data[:, :-1], atol=1e-6)
print(f"positions 0-{T - 2} unchanged by a new last input: {same}; the last changed: "
      f"{not np.allclose(y.data[:, -1], y2.data[:, -1])}")

# The gradient through a stack of 8 blocks, with and without the residual additions.
stack = [L.TransformerBlock(n_embd=C, n_head=H) for _ in range(8)]
for residual in (True, False):
    v = Variable(x)
    h = v
    for b in stack:
        h = block_forward(h, b, residual=residual)
    top = np.random.RandomState(1).randn(*h.shape).astype(np.float32)
    F.sum(h * top).backward()                # the gradient at the top: `top`
    name = "with residuals" if residual else "without them  "
    print(f"8 blocks {name}: gradient norm {np.linalg.norm(top):.4g} at the top, "
          f"{np.linalg.norm(v.grad.data):.4g} at the input")
