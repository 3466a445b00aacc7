"""The op table: one row per function, read by the op tests and the PyTorch tests.

A row names the function, how to call it on Variables, the input shapes, the
numpy reference, whether its gradient is itself differentiable, and the PyTorch
equivalent. tests/test_functions.py and tests/test_torch_reference.py loop over it.

    ROWS[0].fn(*variables)   # dezero; ROWS[0].ref(*arrays) for numpy
"""
import math
from dataclasses import dataclass

import numpy as np

import dezero.functions as F
from dezero import Variable, cuda
from dezero.functions_conv import Pooling2DWithIndexes

# =============================================================================
# Row: one function under test
# =============================================================================


@dataclass
class Row:
    name: str
    fn: object                 # Variables in, Variable out
    shapes: tuple              # one shape per input
    ref: object                # numpy arrays in, array out
    second: bool = True        # the gradient is differentiable again
    torch: object = None       # torch tensors in, tensor out (None: no comparison)
    # Inputs are drawn uniformly from (low, high), away from kinks and poles.
    low: float = -2.0
    high: float = 2.0
    # Keep inputs at least this far from zero (abs, division, negative powers).
    away_from_zero: float = 0.0

    def inputs(self, dtype=np.float64, seed=0):
        rng = np.random.default_rng(seed)
        xs = []
        for shape in self.shapes:
            x = rng.uniform(self.low, self.high, size=shape)
            if self.away_from_zero:
                x = np.where(np.abs(x) < self.away_from_zero,
                             np.copysign(self.away_from_zero, x) + x, x)
            xs.append(x.astype(dtype))
        return xs


def _index():
    return np.array([0, 0, 1, 3])


# A boolean condition, made on the device of the row's inputs (numpy or cupy).
_KEEP = np.array([[True, False, True], [False, False, True]])


def _on(like, array):
    return cuda.get_array_module(like).asarray(array)


def _erf(a):
    return np.vectorize(math.erf, otypes=[a.dtype])(a)


def _layer_norm(x, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)


_ATTEND = np.array([[True, True, True, False, False], [False] * 5, [True] * 5])


def _attention(q, k, v, mask):
    scores = np.where(mask, q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1]), -np.inf)
    e = np.exp(scores - np.max(scores, axis=-1, keepdims=True, initial=-1e300))
    return (e / np.maximum(e.sum(-1, keepdims=True), 1e-300)) @ v  # a row of no keys: zeros


_SEQUENCE_LABELS = np.array([[0, 4, 3], [2, 0, 1]])
_PADDED_LABELS = np.array([[0, 4, -100], [2, -100, 1]])  # -100: padding, ignored


def _cross_entropy(x, t, ignore_index):
    x, t = x.reshape(-1, x.shape[-1]), t.reshape(-1)
    kept = t != ignore_index
    log_p = x - x.max(1, keepdims=True)
    log_p = log_p - np.log(np.exp(log_p).sum(1, keepdims=True))
    return -log_p[kept, t[kept]].mean()


def _torch_cross_entropy(x, t, **kwargs):
    return _torch().nn.functional.cross_entropy(x.reshape(-1, x.shape[-1]),
                                                _torch().tensor(t).reshape(-1), **kwargs)


def _torch():
    import torch  # only the PyTorch tests call a row's torch function
    return torch


def _torch_attention(q, k, v, **kwargs):
    # Its math backend: the fused CPU kernels have no second derivative.
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.MATH):
        return _torch().nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)


def _outer_parts(parts):
    return parts[0] * parts[2]  # the first and last of three parts, the middle one unused


# =============================================================================
# ROWS: arithmetic, elementwise math, shapes, reductions, matmul
# =============================================================================

ROWS = [
    # ---- arithmetic --------------------------------------------------------
    Row("add", F.add, ((2, 3), (2, 3)), np.add, torch=lambda a, b: a + b),
    Row("sub", F.sub, ((2, 3), (2, 3)), np.subtract, torch=lambda a, b: a - b),
    Row("rsub", F.rsub, ((2, 3), (2, 3)), lambda a, b: b - a, torch=lambda a, b: b - a),
    Row("mul", F.mul, ((2, 3), (2, 3)), np.multiply, torch=lambda a, b: a * b),
    Row("div", F.div, ((2, 3), (2, 3)), np.divide, torch=lambda a, b: a / b,
        away_from_zero=0.5),
    Row("rdiv", F.rdiv, ((2, 3), (2, 3)), lambda a, b: b / a, torch=lambda a, b: b / a,
        away_from_zero=0.5),
    Row("neg", F.neg, ((2, 3),), np.negative, torch=lambda a: -a),
    Row("pow3", lambda x: F.pow(x, 3), ((2, 3),), lambda a: a ** 3, torch=lambda a: a ** 3),
    Row("pow2.5", lambda x: F.pow(x, 2.5), ((2, 3),), lambda a: a ** 2.5,
        torch=lambda a: a ** 2.5, low=0.5),
    Row("pow-1", lambda x: F.pow(x, -1), ((2, 3),), lambda a: a ** -1.0,
        torch=lambda a: a ** -1, away_from_zero=0.5),
    # ---- elementwise math --------------------------------------------------
    Row("sin", F.sin, ((2, 3),), np.sin, torch=lambda a: a.sin()),
    Row("cos", F.cos, ((2, 3),), np.cos, torch=lambda a: a.cos()),
    Row("tan", F.tan, ((2, 3),), np.tan, torch=lambda a: a.tan(), low=-1.2, high=1.2),
    Row("tanh", F.tanh, ((2, 3),), np.tanh, torch=lambda a: a.tanh()),
    Row("exp", F.exp, ((2, 3),), np.exp, torch=lambda a: a.exp()),
    Row("expm1", F.expm1, ((2, 3),), np.expm1, torch=lambda a: a.expm1()),
    Row("log", F.log, ((2, 3),), np.log, torch=lambda a: a.log(), low=0.5),
    Row("sqrt", F.sqrt, ((2, 3),), np.sqrt, torch=lambda a: a.sqrt(), low=0.5),
    Row("square", F.square, ((2, 3),), np.square, torch=lambda a: a.square()),
    Row("abs", F.abs, ((2, 3),), np.abs, torch=lambda a: a.abs(), away_from_zero=0.1),
    Row("clip", lambda x: F.clip(x, -1.0, 1.0), ((3, 4),), lambda a: np.clip(a, -1.0, 1.0),
        torch=lambda a: a.clamp(-1.0, 1.0)),
    Row("clip_no_min", lambda x: F.clip(x, None, 0.5), ((3, 4),),
        lambda a: np.clip(a, None, 0.5), torch=lambda a: a.clamp(None, 0.5)),
    Row("clip_no_max", lambda x: F.clip(x, -0.5, None), ((3, 4),),
        lambda a: np.clip(a, -0.5, None), torch=lambda a: a.clamp(-0.5, None)),
    Row("erf", F.erf, ((2, 3),), lambda a: _erf(a), torch=lambda a: a.erf()),
    # ---- shapes ------------------------------------------------------------
    Row("reshape", lambda x: F.reshape(x, (3, 2)), ((2, 3),), lambda a: a.reshape(3, 2),
        torch=lambda a: a.reshape(3, 2)),
    Row("transpose", F.transpose, ((2, 3),), np.transpose, torch=lambda a: a.T),
    Row("transpose_axes", lambda x: F.transpose(x, (1, 0, 2)), ((2, 3, 4),),
        lambda a: a.transpose(1, 0, 2), torch=lambda a: a.permute(1, 0, 2)),
    Row("get_item_int", lambda x: F.get_item(x, 1), ((3, 4),), lambda a: a[1],
        torch=lambda a: a[1]),
    Row("get_item_slice", lambda x: F.get_item(x, (slice(None), slice(1, 3))), ((3, 4),),
        lambda a: a[:, 1:3], torch=lambda a: a[:, 1:3]),
    Row("get_item_ellipsis", lambda x: F.get_item(x, (Ellipsis, 0)), ((2, 3, 4),),
        lambda a: a[..., 0], torch=lambda a: a[..., 0]),
    Row("get_item_repeats", lambda x: F.get_item(x, _index()), ((4, 3),),
        lambda a: a[_index()], torch=lambda a: a[list(_index())]),
    Row("expand_dims", lambda x: F.expand_dims(x, 1), ((2, 3),),
        lambda a: np.expand_dims(a, 1), torch=lambda a: a.unsqueeze(1)),
    Row("flatten", F.flatten, ((2, 3, 4),), lambda a: a.reshape(2, 12),
        torch=lambda a: a.flatten(1)),
    # ---- joining and splitting --------------------------------------------
    Row("concat", lambda a, b: F.concat([a, b], axis=1), ((2, 3), (2, 2)),
        lambda a, b: np.concatenate([a, b], axis=1), torch=lambda a, b: _torch().cat([a, b], 1)),
    Row("concat_three", lambda a, b, c: F.concat([a, b, c]), ((1, 3), (2, 3), (3, 3)),
        lambda a, b, c: np.concatenate([a, b, c]), torch=lambda a, b, c: _torch().cat([a, b, c])),
    Row("stack", lambda a, b: F.stack([a, b], axis=-1), ((2, 3), (2, 3)),
        lambda a, b: np.stack([a, b], axis=-1), torch=lambda a, b: _torch().stack([a, b], -1)),
    # Parts that no gradient reaches get zeros; a product of two parts is not linear.
    Row("split", lambda x: F.split(x, 2, axis=1)[1], ((2, 4),),
        lambda a: np.split(a, 2, axis=1)[1], torch=lambda a: a.tensor_split(2, dim=1)[1]),
    Row("split_indices", lambda x: _outer_parts(F.split(x, [1, 3])), ((4, 3),),
        lambda a: _outer_parts(np.split(a, [1, 3])),
        torch=lambda a: _outer_parts(a.tensor_split([1, 3]))),
    # ---- selection and triangles -------------------------------------------
    Row("where", lambda x, y: F.where(_on(x, _KEEP), x, y), ((2, 3), (2, 3)),
        lambda a, b: np.where(_KEEP, a, b),
        torch=lambda a, b: _torch().where(_torch().tensor(_KEEP), a, b)),
    Row("where_broadcast", lambda x, y: F.where(_on(x, _KEEP[:, :1]), x, y), ((2, 3), (3,)),
        lambda a, b: np.where(_KEEP[:, :1], a, b),
        torch=lambda a, b: _torch().where(_torch().tensor(_KEEP[:, :1]), a, b)),
    Row("where_scalar", lambda x: F.where(_on(x, _KEEP), -1.0, x), ((2, 3),),
        lambda a: np.where(_KEEP, -1.0, a),
        torch=lambda a: _torch().where(_torch().tensor(_KEEP), -1.0, a)),
    Row("tril", lambda x: F.tril(x, -1), ((2, 3, 4),), lambda a: np.tril(a, -1),
        torch=lambda a: a.tril(-1)),
    Row("triu", lambda x: F.triu(x, 1), ((3, 4),), lambda a: np.triu(a, 1),
        torch=lambda a: a.triu(1)),
    # ---- reductions --------------------------------------------------------
    Row("sum", F.sum, ((2, 3),), np.sum, torch=lambda a: a.sum()),
    Row("sum_axis", lambda x: F.sum(x, axis=1), ((2, 3),), lambda a: a.sum(axis=1),
        torch=lambda a: a.sum(1)),
    Row("sum_axes_keepdims", lambda x: F.sum(x, axis=(0, 2), keepdims=True), ((2, 3, 4),),
        lambda a: a.sum(axis=(0, 2), keepdims=True),
        torch=lambda a: a.sum((0, 2), keepdim=True)),
    Row("sum_to", lambda x: F.sum_to(x, (1, 3)), ((2, 3),),
        lambda a: a.sum(0, keepdims=True), torch=lambda a: a.sum(0, keepdim=True)),
    Row("sum_to_lead", lambda x: F.sum_to(x, (3,)), ((2, 3),), lambda a: a.sum(0),
        torch=lambda a: a.sum(0)),
    Row("broadcast_to", lambda x: F.broadcast_to(x, (2, 3)), ((3,),),
        lambda a: np.broadcast_to(a, (2, 3)), torch=lambda a: a.expand(2, 3)),
    Row("average", F.average, ((2, 3),), np.mean, torch=lambda a: a.mean()),
    Row("mean_axis", lambda x: F.mean(x, axis=0), ((2, 3),), lambda a: a.mean(0),
        torch=lambda a: a.mean(0)),
    Row("max", F.max, ((2, 3),), np.max, torch=lambda a: a.max()),
    Row("max_axis_keepdims", lambda x: F.max(x, axis=1, keepdims=True), ((2, 3),),
        lambda a: a.max(1, keepdims=True), torch=lambda a: a.amax(1, keepdim=True)),
    Row("min", F.min, ((2, 3),), np.min, torch=lambda a: a.min()),
    Row("min_axis", lambda x: F.min(x, axis=0), ((2, 3),), lambda a: a.min(0),
        torch=lambda a: a.amin(0)),
    # ---- transformer activations and normalisation ---------------------------
    Row("gelu", F.gelu, ((2, 3),), lambda a: 0.5 * a * (1 + _erf(a / np.sqrt(2))),
        torch=lambda a: _torch().nn.functional.gelu(a)),
    Row("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), ((2, 3),),
        lambda a: 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3))),
        torch=lambda a: _torch().nn.functional.gelu(a, approximate="tanh")),
    Row("silu", F.silu, ((2, 3),), lambda a: a / (1 + np.exp(-a)),
        torch=lambda a: _torch().nn.functional.silu(a)),
    Row("layer_norm", F.layer_norm, ((2, 3, 4), (4,), (4,)), lambda x, g, b: _layer_norm(x) * g + b,
        torch=lambda x, g, b: _torch().nn.functional.layer_norm(x, (4,), g, b, eps=1e-5)),
    # ---- matmul ------------------------------------------------------------
    Row("matmul", F.matmul, ((2, 3), (3, 4)), np.matmul, torch=lambda a, b: a @ b),
    Row("matmul_batched", F.matmul, ((5, 2, 3), (3, 4)), np.matmul,
        torch=lambda a, b: a @ b),
    # Batch axes broadcast as numpy's: (B, H, T, d) @ (B, H, d, T), a shared weight.
    Row("matmul_4d", F.matmul, ((2, 3, 4, 5), (2, 3, 5, 2)), np.matmul,
        torch=lambda a, b: a @ b),
    Row("matmul_broadcast_batch", F.matmul, ((2, 1, 4, 5), (3, 5, 2)), np.matmul,
        torch=lambda a, b: a @ b),
    Row("linear", F.linear, ((2, 3), (3, 4), (4,)), lambda x, W, b: x @ W + b,
        torch=lambda x, W, b: x @ W + b),
    Row("linear_nobias", F.linear, ((2, 3), (3, 4)), np.matmul, torch=lambda a, b: a @ b),
    # (N, T, in) inputs: every leading axis is a batch axis, W stays (in, out).
    Row("linear_batched", F.linear, ((2, 3, 4), (4, 5), (5,)), lambda x, W, b: x @ W + b,
        torch=lambda x, W, b: x @ W + b),
    Row("linear_batched_nobias", F.linear, ((3, 2, 2, 3), (3, 4)), np.matmul,
        torch=lambda a, b: a @ b),
    # ---- attention ---------------------------------------------------------
    Row("attention", F.scaled_dot_product_attention, ((2, 3, 4), (2, 5, 4), (2, 5, 3)),
        lambda q, k, v: _attention(q, k, v, np.ones((3, 5), bool)),
        torch=_torch_attention),
    # Query 1 attends to no key: zeros, as PyTorch gives.
    Row("attention_mask", lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, mask=_on(q, _ATTEND)), ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)),
        lambda q, k, v: _attention(q, k, v, _ATTEND),
        torch=lambda q, k, v: _torch_attention(q, k, v, attn_mask=_torch().tensor(_ATTEND))),
    Row("attention_causal", lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True), ((2, 3, 4), (2, 5, 4), (2, 5, 4)),
        lambda q, k, v: _attention(q, k, v, np.tri(3, 5, dtype=bool)),
        torch=lambda q, k, v: _torch_attention(q, k, v, is_causal=True)),
    # ---- losses over sequences -----------------------------------------------
    Row("softmax_cross_entropy_sequences", lambda x: F.softmax_cross_entropy(
        x, _on(x, _SEQUENCE_LABELS)), ((2, 3, 5),),
        lambda a: _cross_entropy(a, _SEQUENCE_LABELS, None),
        torch=lambda a: _torch_cross_entropy(a, _SEQUENCE_LABELS)),
    Row("softmax_cross_entropy_ignore_index", lambda x: F.softmax_cross_entropy(
        x, _on(x, _PADDED_LABELS), ignore_index=-100), ((2, 3, 5),),
        lambda a: _cross_entropy(a, _PADDED_LABELS, -100),
        torch=lambda a: _torch_cross_entropy(a, _PADDED_LABELS, ignore_index=-100)),
]


# =============================================================================
# EXTRA_CALLS: ops that no row (nor its backward) reaches
# =============================================================================

# op name -> a call returning an output Variable, for ops whose inputs a Row cannot
# describe (integer labels, random ops ...). tests/test_core.py checks that every
# registered op is reached by ROWS or by these calls, and rebuilds it from its attrs.
def _x(*shape, seed=0):
    return Variable(np.random.default_rng(seed).uniform(-2, 2, size=shape))


def _labels():
    return np.array([0, 2, 1, 2])


def _allreduce(x):
    # Registered by dezero.distributed; in a world of one (mpi4py comes with the test
    # extra) the mean over the ranks is x itself.
    import dezero.distributed as dist
    return dist.init().allreduce(x, op="mean")


def _world():
    # dezero.distributed, its world of one made (the collectives' ops name it).
    import dezero.distributed as dist
    dist.init()
    return dist


EXTRA_CALLS = {
    "sign": lambda: F.sign(Variable(np.array([-1.0, 0.0, 2.0]))),
    # ---- neural-network functions (tested in depth in test_functions_nn.py) --
    "accuracy": lambda: F.accuracy(_x(4, 3), _labels()),
    "astype": lambda: F.astype(_x(2, 3), np.float32),
    "sigmoid": lambda: F.sigmoid(_x(2, 3)),
    "relu": lambda: F.relu(_x(2, 3)),
    "leaky_relu": lambda: F.leaky_relu(_x(2, 3)),
    "softmax": lambda: F.softmax(_x(2, 3)),
    "log_softmax": lambda: F.log_softmax(_x(2, 3)),
    "softplus": lambda: F.softplus(_x(2, 3)),
    "softmax_cross_entropy": lambda: F.softmax_cross_entropy(_x(4, 3), _labels()),
    # Labels checked already: the one_hot a second derivative of softmax_cross_entropy
    # computes.
    "one_hot": lambda: F.OneHot(3, "float64", None)(_labels()),
    # A step of softmax_cross_entropy in traced graphs (test_trace_softmax_kernels.py).
    "pick_labels": lambda: F.PickLabels()(_x(4, 3), _labels()),
    "mean_squared_error": lambda: F.mean_squared_error(_x(2, 3), _x(2, 3, seed=1)),
    "probabilities": lambda: F.binary_cross_entropy(
        Variable(np.random.default_rng(0).uniform(0.1, 0.9, (2, 3))), np.ones((2, 3))),
    "dropout_mask": lambda: F.dropout(_x(2, 3)),
    "embed_id": lambda: F.embed_id(_labels(), _x(3, 5)),
    # A number of sizes (1 / B) that a graph of symbolic sizes computes at each replay.
    "size_number": lambda: F.SizeNumber(0.25, "float64")(_x(2, 3)),
    # ---- convolution and pooling (tested in depth in test_functions_conv.py) --
    "conv2d": lambda: F.conv2d(_x(1, 2, 5, 5), _x(3, 2, 3, 3, seed=1), _x(3, seed=2),
                               stride=1, pad=1),
    "deconv2d": lambda: F.deconv2d(_x(1, 3, 3, 3), _x(3, 2, 3, 3, seed=1), stride=2),
    "im2col": lambda: F.im2col(_x(1, 2, 4, 4), 2),
    "pooling": lambda: F.pooling(_x(1, 2, 4, 4), 2, 2),
    # Reached only by a third derivative of pooling, so called directly.
    "pooling_with_indexes": lambda: Pooling2DWithIndexes(2, 2)(_x(1, 2, 4, 4),
                                                              _x(1, 2, 4, 4, seed=1)),
    "average_pooling": lambda: F.average_pooling(_x(1, 2, 4, 4), 2, 2),
    "first_max_mask": lambda: F.pooling_simple(_x(1, 2, 4, 4), 2, 2),
    # ---- collectives (tested in test_distributed.py and test_distributed_mpi.py) --
    "allreduce": lambda: _allreduce(_x(2, 3)),
    "reduce_scatter": lambda: _world().ReduceScatter("world", "mean")(_x(2, 3), _x(4)),
    "allgather": lambda: _world().Allgather("world", ((2, 3), (4,)))(_x(10))[0],
}
