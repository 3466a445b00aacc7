"""The ops: one Function class each, plus the function users call.

Each class computes `forward` on arrays and `backward` with other functions of
this module, so every derivative can be differentiated again. Elementwise ops
also carry `cpp`, the C++ expression the trace compiler fuses into kernels.
Sits on core.py; layers, optimizers and the tracer build on it.

    y = F.tanh(x); y.backward(create_graph=True)
"""
import numpy as np

from dezero import cuda, utils
from dezero.core import Function, Variable, as_operand, as_variable

# =============================================================================
# Arithmetic: add, sub, rsub, mul, div, rdiv, neg, pow
# =============================================================================


class Add(Function):
    cpp = "{x0} + {x1}"
    commutative = True

    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        x0, x1 = self.inputs
        return _unbroadcast(gy, x0.shape), _unbroadcast(gy, x1.shape)


def _unbroadcast(gy, shape):
    # A broadcast input receives the gradient summed back to its own shape.
    return gy if gy.shape == shape else sum_to(gy, shape)


def add(x0, x1):
    return Add()(x0, as_operand(x1, x0))


class Sub(Function):
    cpp = "{x0} - {x1}"

    def forward(self, x0, x1):
        return x0 - x1

    def backward(self, gy):
        x0, x1 = self.inputs
        return _unbroadcast(gy, x0.shape), _unbroadcast(-gy, x1.shape)


def sub(x0, x1):
    return Sub()(x0, as_operand(x1, x0))


def rsub(x0, x1):
    return Sub()(as_operand(x1, x0), x0)


class Mul(Function):
    cpp = "{x0} * {x1}"
    commutative = True

    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs
        return _unbroadcast(gy * x1, x0.shape), _unbroadcast(gy * x0, x1.shape)


def mul(x0, x1):
    return Mul()(x0, as_operand(x1, x0))


class Div(Function):
    cpp = "{x0} / {x1}"

    def forward(self, x0, x1):
        return x0 / x1

    def backward(self, gy):
        x0, x1 = self.inputs
        gx0 = gy / x1
        gx1 = gy * (-x0 / x1 ** 2)
        return _unbroadcast(gx0, x0.shape), _unbroadcast(gx1, x1.shape)


def div(x0, x1):
    return Div()(x0, as_operand(x1, x0))


def rdiv(x0, x1):
    return Div()(as_operand(x1, x0), x0)


class Neg(Function):
    cpp = "-{x}"

    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy


def neg(x):
    return Neg()(x)


class Pow(Function):
    """y = x ** c for a constant exponent c."""
    cpp = "pow({x}, {c})"

    def __init__(self, c):
        self.c = c

    def forward(self, x):
        return x ** self.c

    def backward(self, gy):
        x, = self.inputs
        return self.c * x ** (self.c - 1) * gy


def pow(x, c):
    if isinstance(c, Variable) or isinstance(c, cuda.array_types):
        raise TypeError("pow: the exponent must be a Python number, got "
                        f"{type(c).__name__}; use exp(c * log(x)) for a variable exponent")
    return Pow(c)(x)


# =============================================================================
# Elementwise math: sin, cos, tan, tanh, exp, log, sqrt, square, abs, clip
# =============================================================================


class Sin(Function):
    cpp = "sin({x})"

    def forward(self, x):
        return cuda.get_array_module(x).sin(x)

    def backward(self, gy):
        x, = self.inputs
        return gy * cos(x)


def sin(x):
    return Sin()(x)


class Cos(Function):
    cpp = "cos({x})"

    def forward(self, x):
        return cuda.get_array_module(x).cos(x)

    def backward(self, gy):
        x, = self.inputs
        return gy * -sin(x)


def cos(x):
    return Cos()(x)


class Tan(Function):
    cpp = "tan({x})"

    def forward(self, x):
        return cuda.get_array_module(x).tan(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy * (1 + y * y)


def tan(x):
    return Tan()(x)


class Tanh(Function):
    cpp = "tanh({x})"

    def forward(self, x):
        return cuda.get_array_module(x).tanh(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy * (1 - y * y)


def tanh(x):
    return Tanh()(x)


class Exp(Function):
    cpp = "exp({x})"

    def forward(self, x):
        return cuda.get_array_module(x).exp(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy * y


def exp(x):
    return Exp()(x)


class Log(Function):
    cpp = "log({x})"

    def forward(self, x):
        return cuda.get_array_module(x).log(x)

    def backward(self, gy):
        x, = self.inputs
        return gy / x


def log(x):
    return Log()(x)


class Sqrt(Function):
    cpp = "sqrt({x})"

    def forward(self, x):
        return cuda.get_array_module(x).sqrt(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy / (2 * y)


def sqrt(x):
    return Sqrt()(x)


class Square(Function):
    cpp = "{x} * {x}"

    def forward(self, x):
        return x * x

    def backward(self, gy):
        x, = self.inputs
        return 2 * x * gy


def square(x):
    return Square()(x)


class Abs(Function):
    cpp = "fabs({x})"

    def forward(self, x):
        return abs(x)

    def backward(self, gy):
        x, = self.inputs
        return gy * sign(x)


def abs(x):
    return Abs()(x)


class Sign(Function):
    """-1, 0 or 1 by the sign of x; its gradient is zero."""
    cpp = "({x} > 0) - ({x} < 0)"

    def forward(self, x):
        return cuda.get_array_module(x).sign(x)

    def backward(self, gy):
        return None


def sign(x):
    return Sign()(x)


class Clip(Function):
    cpp = "fmin(fmax({x}, {x_min}), {x_max})"

    def __init__(self, x_min, x_max):
        self.x_min = x_min
        self.x_max = x_max

    def forward(self, x):
        return cuda.get_array_module(x).clip(x, self.x_min, self.x_max)

    def backward(self, gy):
        x, = self.inputs
        return gy * InRange(self.x_min, self.x_max)(x)


def clip(x, x_min, x_max):
    return Clip(x_min, x_max)(x)


class InRange(Function):
    """1 where x_min <= x <= x_max, else 0 (in x's dtype); not differentiable."""
    cpp = "({x} >= {x_min} && {x} <= {x_max}) ? 1 : 0"

    def __init__(self, x_min, x_max):
        self.x_min = x_min
        self.x_max = x_max

    def forward(self, x):
        return ((x >= self.x_min) & (x <= self.x_max)).astype(x.dtype)

    def backward(self, gy):
        return None


class Equal(Function):
    """1 where x0 == x1, else 0 (in x0's dtype); not differentiable."""
    cpp = "({x0} == {x1}) ? 1 : 0"
    commutative = True

    def forward(self, x0, x1):
        return (x0 == x1).astype(x0.dtype)

    def backward(self, gy):
        return None, None


# =============================================================================
# Shapes: reshape, transpose, get_item, expand_dims, flatten
# =============================================================================


class Reshape(Function):
    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        return x.reshape(self.shape)

    def backward(self, gy):
        return reshape(gy, self.inputs[0].shape)


def reshape(x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return as_variable(x)
    return Reshape(shape)(x)


class Transpose(Function):
    def __init__(self, axes=None):
        self.axes = axes

    def forward(self, x):
        return x.transpose(self.axes)

    def backward(self, gy):
        if self.axes is None:
            return transpose(gy)
        inverse = tuple(int(i) for i in np.argsort([a % gy.ndim for a in self.axes]))
        return transpose(gy, inverse)


def transpose(x, axes=None):
    return Transpose(None if axes is None else tuple(axes))(x)


class GetItem(Function):
    """y = x[slices]; index arrays may repeat (the backward adds them up)."""

    def __init__(self, slices):
        self.slices = slices

    def forward(self, x):
        return x[self.slices]

    def backward(self, gy):
        x, = self.inputs
        return GetItemGrad(self.slices, x.shape)(gy)


class GetItemGrad(Function):
    """Scatter-add gy into zeros of in_shape at slices: the adjoint of GetItem."""

    def __init__(self, slices, in_shape):
        self.slices = slices
        self.in_shape = in_shape

    def forward(self, gy):
        xp = cuda.get_array_module(gy)
        gx = xp.zeros(self.in_shape, dtype=gy.dtype)
        if xp is np:
            np.add.at(gx, self.slices, gy)
        else:
            import cupyx
            cupyx.scatter_add(gx, self.slices, gy)
        return gx

    def backward(self, ggx):
        return get_item(ggx, self.slices)


def get_item(x, slices):
    return GetItem(slices)(x)


def expand_dims(x, axis):
    x = as_variable(x)
    shape = list(x.shape)
    shape.insert(axis if axis >= 0 else len(shape) + axis + 1, 1)
    return reshape(x, tuple(shape))


def flatten(x):
    """(N, ...) -> (N, -1): keep the batch axis, flatten the rest."""
    x = as_variable(x)
    return reshape(x, (x.shape[0], -1))


# =============================================================================
# Broadcast and reductions: sum, sum_to, broadcast_to, average, mean, max, min
# =============================================================================


class Sum(Function):
    def __init__(self, axis=None, keepdims=False):
        self.axis = axis
        self.keepdims = keepdims

    def forward(self, x):
        return x.sum(axis=self.axis, keepdims=self.keepdims)

    def backward(self, gy):
        x, = self.inputs
        gy = utils.reshape_sum_backward(gy, x.shape, self.axis, self.keepdims)
        return broadcast_to(gy, x.shape)


def sum(x, axis=None, keepdims=False):
    if isinstance(axis, list):
        axis = tuple(axis)
    return Sum(axis, keepdims)(x)


class SumTo(Function):
    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        return utils.sum_to(x, self.shape)

    def backward(self, gy):
        return broadcast_to(gy, self.inputs[0].shape)


def sum_to(x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return as_variable(x)
    return SumTo(shape)(x)


class BroadcastTo(Function):
    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        return cuda.get_array_module(x).broadcast_to(x, self.shape)

    def backward(self, gy):
        return sum_to(gy, self.inputs[0].shape)


def broadcast_to(x, shape):
    shape = tuple(shape)
    if x.shape == shape:
        return as_variable(x)
    return BroadcastTo(shape)(x)


def average(x, axis=None, keepdims=False):
    """Mean over axis: sum(x) * (len(y) / len(x))."""
    x = as_variable(x)
    y = sum(x, axis, keepdims)
    return y * (y.data.size / x.data.size)


mean = average


class Max(Function):
    def __init__(self, axis=None, keepdims=False):
        self.axis = axis
        self.keepdims = keepdims

    def forward(self, x):
        return x.max(axis=self.axis, keepdims=self.keepdims)

    def backward(self, gy):
        return _extreme_backward(self, gy)


class Min(Max):
    def forward(self, x):
        return x.min(axis=self.axis, keepdims=self.keepdims)


def _extreme_backward(f, gy):
    # Every position equal to the extreme receives the gradient.
    x, = f.inputs
    y = f.outputs[0]()
    shape = utils.max_backward_shape(x, f.axis)
    gy = broadcast_to(reshape(gy, shape), x.shape)
    mask = Equal()(x, broadcast_to(reshape(y, shape), x.shape))
    return gy * mask


def max(x, axis=None, keepdims=False):
    return Max(axis, keepdims)(x)


def min(x, axis=None, keepdims=False):
    return Min(axis, keepdims)(x)


# =============================================================================
# Matrix products: matmul, rmatmul, linear
# =============================================================================


def _check_matmul(op, x, W):
    if x.ndim < 2 or W.ndim < 2 or x.shape[-1] != W.shape[-2]:
        raise ValueError(
            f"{op}: cannot multiply shapes {x.shape} and {W.shape}; the last axis of x "
            f"must equal the second-to-last axis of W, and both need ndim >= 2 "
            f"(reshape a vector v to (1, n) with v.reshape(1, -1))")


class MatMul(Function):
    def forward(self, x, W):
        _check_matmul(self.op_name, x, W)
        return x @ W

    def backward(self, gy):
        x, W = self.inputs
        gx = matmul(gy, _swap_last(W))
        gW = matmul(_swap_last(x), gy)
        return _unbroadcast(gx, x.shape), _unbroadcast(gW, W.shape)


def _swap_last(x):
    if x.ndim == 2:
        return transpose(x)
    axes = list(range(x.ndim))
    axes[-1], axes[-2] = axes[-2], axes[-1]
    return transpose(x, axes)


def matmul(x, W):
    return MatMul()(x, as_operand(W, x))


def rmatmul(W, x):
    """x @ W where x is an array on the left of a Variable."""
    return MatMul()(as_operand(x, W), W)


class Linear(Function):
    """y = x @ W + b (b optional)."""

    def forward(self, x, W, b=None):
        _check_matmul(self.op_name, x, W)
        y = x @ W
        return y if b is None else y + b

    def backward(self, gy):
        x, W = self.inputs[:2]
        gx = matmul(gy, W.T)
        gW = matmul(x.T, gy)
        if len(self.inputs) == 2:
            return gx, gW
        return gx, gW, sum_to(gy, self.inputs[2].shape)


def linear(x, W, b=None):
    if b is None:
        return Linear()(x, W)
    return Linear()(x, W, b)
