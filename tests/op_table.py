"""The op table: one row per function, read by the op tests and the PyTorch tests.

A row names the function, how to call it on Variables, the input shapes, the
numpy reference, whether its gradient is itself differentiable, and the PyTorch
equivalent. tests/test_functions.py and tests/test_torch_reference.py loop over it.

    ROWS[0].fn(*variables)   # dezero; ROWS[0].ref(*arrays) for numpy
"""
from dataclasses import dataclass

import numpy as np

import dezero.functions as F
from dezero import Variable

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
    Row("log", F.log, ((2, 3),), np.log, torch=lambda a: a.log(), low=0.5),
    Row("sqrt", F.sqrt, ((2, 3),), np.sqrt, torch=lambda a: a.sqrt(), low=0.5),
    Row("square", F.square, ((2, 3),), np.square, torch=lambda a: a.square()),
    Row("abs", F.abs, ((2, 3),), np.abs, torch=lambda a: a.abs(), away_from_zero=0.1),
    Row("clip", lambda x: F.clip(x, -1.0, 1.0), ((3, 4),), lambda a: np.clip(a, -1.0, 1.0),
        torch=lambda a: a.clamp(-1.0, 1.0)),
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
    # ---- matmul ------------------------------------------------------------
    Row("matmul", F.matmul, ((2, 3), (3, 4)), np.matmul, torch=lambda a, b: a @ b),
    Row("matmul_batched", F.matmul, ((5, 2, 3), (3, 4)), np.matmul,
        torch=lambda a, b: a @ b),
    Row("linear", F.linear, ((2, 3), (3, 4), (4,)), lambda x, W, b: x @ W + b,
        torch=lambda x, W, b: x @ W + b),
    Row("linear_nobias", F.linear, ((2, 3), (3, 4)), np.matmul, torch=lambda a, b: a @ b),
]


# =============================================================================
# EXTRA_CALLS: ops that no row (nor its backward) reaches
# =============================================================================

# op name -> a call returning an output Variable, for ops whose inputs a Row cannot
# describe (integer labels, random ops ...). tests/test_core.py checks that every
# registered op is reached by ROWS or by these calls, and rebuilds it from its attrs.
EXTRA_CALLS = {
    "sign": lambda: F.sign(Variable(np.array([-1.0, 0.0, 2.0]))),
}
