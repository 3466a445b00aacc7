"""The ops: one Function class each, plus the function users call.

Each class computes `forward` on arrays and `backward` with other functions of
this module, so every derivative can be differentiated again. Elementwise ops
also carry `cpp`, the C++ expression the trace compiler fuses into kernels.
Sits on core.py; layers, optimizers and the tracer build on it.

    y = F.tanh(x); y.backward(create_graph=True)
"""
import functools
import itertools
import math
import operator
import warnings

import numpy as np

from dezero import core, cuda, utils
from dezero.core import Config, Constant, Function, Variable, as_operand, as_variable, no_grad
from dezero.errors import TraceError, user_stacklevel
from dezero.errors import where as user_line
from dezero.op_record import broadcast_shapes

# =============================================================================
# Shape rules: the `shapes` fact of the ops that are not elementwise
# =============================================================================
# Each takes the input shapes and the attrs and gives the result shapes, in plain
# Python, so that it also takes a trace's symbolic sizes (SymInts: a comparison on
# one is recorded as a relation the replay checks). None: no rule for these attrs
# (an index array), and the tracer fixes the sizes (Function.shapes).


def _same_shape(shapes, attrs):
    return [shapes[0]]


def _reduced(shape, axis, keepdims) -> tuple:
    axes = range(len(shape)) if axis is None else {
        a % len(shape) for a in (axis if isinstance(axis, tuple) else (axis,))}
    return tuple(1 if i in axes else n for i, n in enumerate(shape)
                 if keepdims or i not in axes)


def _slice_length(s: slice, n):
    """len(range(n)[s]) for a step of 1 (None for another step)."""
    if s.step not in (None, 1):
        return None
    bounds = []
    for bound, default in ((s.start, 0), (s.stop, n)):
        bound = default if bound is None else bound
        if bound < 0:
            bound = bound + n
            if bound < 0:
                bound = 0
        elif bound > n:
            bound = n
        bounds.append(bound)
    start, stop = bounds
    return stop - start if stop > start else 0


def _indexed(shapes, attrs):
    """x[slices] for basic indexing (ints, slices of step 1, None, ...)."""
    shape, key = list(shapes[0]), attrs["slices"]
    key = list(key) if type(key) is tuple else [key]
    if any(not (k is None or k is Ellipsis or type(k) is slice or isinstance(
            k, (int, np.integer, core.TracedSize))) or isinstance(k, bool) for k in key):
        return None
    if Ellipsis in key:
        at = key.index(Ellipsis)
        key[at:at + 1] = [slice(None)] * (len(shape) - sum(k is not None for k in key) + 1)
    out, axis = [], 0
    for k in key:
        if k is None:
            out.append(1)
            continue
        if type(k) is slice:
            length = _slice_length(k, shape[axis])
            if length is None:
                return None
            out.append(length)
        axis += 1
    return [tuple(out) + tuple(shape[axis:])]


def _reshaped(shapes, attrs):
    shape, new = shapes[0], list(attrs["shape"])
    size = math.prod(shape)
    unknown = [i for i, n in enumerate(new) if type(n) is int and n == -1]
    if unknown:
        new[unknown[0]] = size // math.prod(n for i, n in enumerate(new) if i != unknown[0])
    if not math.prod(new) == size:  # a relation where the sizes are symbolic
        raise ValueError(f"reshape: cannot reshape {tuple(shape)} to {tuple(new)}")
    return [tuple(new)]


def _transposed(shapes, attrs):
    shape, axes = shapes[0], attrs["axes"]
    return [tuple(reversed(shape)) if axes is None else tuple(shape[a] for a in axes)]


def _product(shapes, attrs):
    x, W = shapes[0], shapes[1]
    if not x[-1] == W[-2]:
        raise ValueError(f"cannot multiply shapes {tuple(x)} and {tuple(W)}")
    return [broadcast_shapes(x[:-2], W[:-2]) + (x[-2], W[-1])]


def _linear_shape(shapes, attrs):
    x, W = shapes[0], shapes[1]
    if not x[-1] == W[0]:
        raise ValueError(f"cannot multiply shapes {tuple(x)} and {tuple(W)}")
    return [tuple(x[:-1]) + (W[1],)]


def _reduce_shape(shapes, attrs):
    return [_reduced(shapes[0], attrs["axis"], attrs["keepdims"])]


def _joined(shapes, axis):
    axis %= len(shapes[0])
    # functools.reduce, not sum: this module's sum is the op
    length = functools.reduce(operator.add, (s[axis] for s in shapes))
    return [shapes[0][:axis] + (length,) + shapes[0][axis + 1:]]


def _split_shapes(shapes, attrs):
    shape, axis = shapes[0], attrs["axis"] % len(shapes[0])
    bounds = (0, *attrs["indices"], shape[axis])
    return [shape[:axis] + (stop - start,) + shape[axis + 1:]
            for start, stop in zip(bounds, bounds[1:])]


def _attr_shape(name):
    return lambda shapes, attrs: [tuple(attrs[name])]


# =============================================================================
# Arithmetic: add, sub, rsub, mul, div, rdiv, neg, pow
# =============================================================================


class Add(Function):
    cpp = "{x0} + {x1}"
    py = "{x0} + {x1}"
    commutative = True

    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        x0, x1 = self.inputs
        # A Constant (the 2 in `y * 2`) gets no gradient: nobody could read it.
        gx0 = None if isinstance(x0, Constant) else _unbroadcast(gy, x0)
        gx1 = None if isinstance(x1, Constant) else _unbroadcast(gy, x1)
        return gx0, gx1


def _unbroadcast(gy, x):
    # A broadcast input receives the gradient summed back to its own shape.
    return gy if gy.shape == x.shape else sum_to(gy, x.shape)


def add(x0, x1):
    return Add()(as_operand(x0, x1), as_operand(x1, x0))


class Sub(Function):
    cpp = "{x0} - {x1}"
    py = "{x0} - {x1}"
    neutral = {1: 0}  # x - 0 == x exactly (x + 0 is not: -0.0 + 0 == +0.0)

    def forward(self, x0, x1):
        return x0 - x1

    def backward(self, gy):
        x0, x1 = self.inputs
        gx0 = None if isinstance(x0, Constant) else _unbroadcast(gy, x0)
        gx1 = None if isinstance(x1, Constant) else _unbroadcast(-gy, x1)
        return gx0, gx1


def sub(x0, x1):
    return Sub()(as_operand(x0, x1), as_operand(x1, x0))


def rsub(x0, x1):
    return Sub()(as_operand(x1, x0), x0)


class Mul(Function):
    cpp = "{x0} * {x1}"
    py = "{x0} * {x1}"
    neutral = {0: 1, 1: 1}  # 1 * x == x * 1 == x
    commutative = True

    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs
        gx0 = None if isinstance(x0, Constant) else _unbroadcast(gy * x1, x0)
        gx1 = None if isinstance(x1, Constant) else _unbroadcast(gy * x0, x1)
        return gx0, gx1


def mul(x0, x1):
    return Mul()(as_operand(x0, x1), as_operand(x1, x0))


class Div(Function):
    cpp = "{x0} / {x1}"
    py = "{x0} / {x1}"
    neutral = {1: 1}  # x / 1 == x

    def forward(self, x0, x1):
        return x0 / x1

    def backward(self, gy):
        x0, x1 = self.inputs
        gx0 = None if isinstance(x0, Constant) else _unbroadcast(gy / x1, x0)
        gx1 = None if isinstance(x1, Constant) else _unbroadcast(gy * (-x0 / x1 ** 2), x1)
        return gx0, gx1


def div(x0, x1):
    return Div()(as_operand(x0, x1), _divisor(x1, x0))


def rdiv(x0, x1):
    return Div()(_divisor(x1, x0), x0)


def _divisor(x, like):
    """as_operand for a division: numpy divides integers in float64, so numpy 2 takes
    an int beyond the array's dtype there (uint8 [3] / -1 is [-3.0]), where * -1 raises."""
    try:
        return as_operand(x, like)
    except OverflowError:
        return as_operand(float(x), like)


class Neg(Function):
    cpp = "-{x}"
    py = "-{x}"

    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy


def neg(x):
    return Neg()(x)


class Pow(Function):
    """y = x ** c for a constant exponent c."""

    @staticmethod
    def cpp(c):
        # Decided when the kernel is written, c being a constant: numpy computes
        # x ** 0.5 as sqrt(x) (pow differs at -0.0 and -inf) and x ** 2 as x * x; a cube
        # is products too, as pow's vector math takes a slow path at each negative x.
        return {0.5: "sqrt({x})", 2: "{x} * {x}", 3: "{x} * {x} * {x}"}.get(c, "pow({x}, {c})")

    @staticmethod
    def py(in_types, out_shape, attrs):
        (_, dtype), = in_types
        return _PRODUCTS.get(attrs["c"], "{x} ** {c}") if dtype.kind == "f" else "{x} ** {c}"

    neutral_attrs = {"c": 1}  # x ** 1 == x

    def __init__(self, c):
        self.c = c

    def forward(self, x):
        # A float square or cube as products: np.power takes ~40x as long on a cube
        # (x * x * x may differ from it in the last bit; the kernels spell the same).
        if x.dtype.kind == "f" and self.c in _PRODUCTS:
            return x * x if self.c == 2 else x * x * x
        return x ** _like(self.c, x)

    def backward(self, gy):
        x, = self.inputs
        if self.c == 0:
            return gy * 0  # x ** 0 is constant, also at x = 0 (where 0 * x ** -1 is NaN)
        return self.c * x ** (self.c - 1) * gy


_PRODUCTS = {2: "{x} * {x}", 3: "{x} * {x} * {x}"}  # Pow's float spellings of x ** 2, x ** 3


def _like(c, x):
    """The Python number c as a numpy scalar of x's float dtype. numpy 1.x promotes
    a 0-d float32 array meeting a Python float (x * 0.5, maximum(x, 0)) to float64;
    numpy 2 and larger arrays keep float32. Other dtypes get c as it is."""
    return x.dtype.type(c) if x.dtype.kind == "f" else c


def pow(x, c):
    if isinstance(c, Variable) or isinstance(c, cuda.array_types):
        raise TypeError("pow: the exponent must be a Python number, got "
                        f"{type(c).__name__}; use exp(c * log(x)) for a variable exponent")
    return Pow(c)(x)


# =============================================================================
# Elementwise math: sin, cos, tan, tanh, exp, expm1, erf, log, sqrt, square, abs,
#   clip
# =============================================================================


class Sin(Function):
    cpp = "sin({x})"
    py = "_xp.sin({x})"

    def forward(self, x):
        return cuda.get_array_module(x).sin(x)

    def backward(self, gy):
        x, = self.inputs
        return gy * cos(x)


def sin(x):
    return Sin()(x)


class Cos(Function):
    cpp = "cos({x})"
    py = "_xp.cos({x})"

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
    py = "_xp.tanh({x})"

    def forward(self, x):
        return cuda.get_array_module(x).tanh(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy * (1 - y * y)


def tanh(x):
    return Tanh()(x)


class Exp(Function):
    cpp = "exp({x})"
    py = "_xp.exp({x})"

    def forward(self, x):
        return cuda.get_array_module(x).exp(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy * y


def exp(x):
    return Exp()(x)


class Expm1(Function):
    """exp(x) - 1 without the rounding of exp(x) near 1: for small x it keeps
    every digit that exp(x) - 1 loses (Adam's 1 - beta ** t is -expm1(t log beta))."""
    cpp = "expm1({x})"
    py = "_xp.expm1({x})"

    def forward(self, x):
        return cuda.get_array_module(x).expm1(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy * (y + 1)


def expm1(x):
    return Expm1()(x)


# numpy has no erf (a fused kernel calls C++'s). On the CPU, in float64: |x| cut into
# pieces of 1/32 on [0, 6), each with erf's Taylor polynomial about its centre (about 0
# for the first, whose constant term is 0, so tiny x keep their digits); erf(x) rounds
# to 1 beyond 6. Within 2 ulp of math.erf, and about 3.5x as fast as it per element.
_ERF_STEPS, _ERF_DEGREE, _ERF_END = 32, 10, 6.0


def _erf_pieces():
    """(centres, coefficients[degree, piece]): Taylor coefficients of erf about each
    centre c, from erf(c) and the recurrence of exp(-x * x)'s, (n + 1) b[n+1] =
    -2 c b[n] - 2 b[n-1] (its derivative is -2 x exp(-x * x))."""
    centres = [0.0] + [(k + 0.5) / _ERF_STEPS for k in range(1, int(_ERF_END * _ERF_STEPS))]
    columns = []
    for c in centres:
        b = [math.exp(-c * c), -2 * c * math.exp(-c * c)]
        for n in range(1, _ERF_DEGREE - 1):
            b.append((-2 * c * b[n] - 2 * b[n - 1]) / (n + 1))
        columns.append([math.erf(c)] + [2 / math.sqrt(math.pi) * b[n] / (n + 1)
                                        for n in range(_ERF_DEGREE)])
    return np.array(centres), np.array(columns).T.copy()


_ERF_CENTRES, _ERF_COEFFICIENTS = _erf_pieces()


def _numpy_erf(x):
    a = np.abs(x.astype(np.float64).reshape(-1))  # 1-d: a 0-d x would give scalars
    # fmin: NaN takes the last piece; minimum keeps it NaN through the polynomial, and
    # keeps large |x| (which gets 1) from overflowing it.
    piece = np.minimum((np.fmin(a, _ERF_END) * _ERF_STEPS).astype(np.intp),
                       len(_ERF_CENTRES) - 1)
    d = np.minimum(a, _ERF_END) - _ERF_CENTRES.take(piece)
    y = _ERF_COEFFICIENTS[-1].take(piece)
    for row in _ERF_COEFFICIENTS[-2::-1]:  # in place: each new array costs page faults
        y *= d
        y += row.take(piece)
    y[a >= _ERF_END] = 1.0
    y = np.copysign(y.reshape(x.shape), x)  # erf is odd: erf(-0.0) = -0.0
    return y.astype(x.dtype, copy=False)


@functools.cache
def _cupy_erf(cupy):
    return cupy.ElementwiseKernel("T x", "T y", "y = erf(x)", "dezero_erf")


class Erf(Function):
    """y = erf(x) = 2 / sqrt(pi) * (the integral of exp(-t * t) from 0 to x)."""
    cpp = "erf({x})"

    def forward(self, x):
        if x.dtype.kind != "f":
            x = x.astype(np.float64)
        xp = cuda.get_array_module(x)
        if xp is np:
            return _numpy_erf(x)
        return _cupy_erf(xp)(x)

    def backward(self, gy):
        x, = self.inputs
        return gy * (2 / math.sqrt(math.pi)) * exp(-x * x)


def erf(x):
    """The error function, elementwise: 2 / sqrt(pi) * integral of exp(-t * t), 0..x.

    >>> erf(np.array([0.0, np.inf])).data
    array([0., 1.])
    """
    return Erf()(x)


class Log(Function):
    cpp = "log({x})"
    py = "_xp.log({x})"

    def forward(self, x):
        return cuda.get_array_module(x).log(x)

    def backward(self, gy):
        x, = self.inputs
        return gy / x


def log(x):
    return Log()(x)


class Sqrt(Function):
    cpp = "sqrt({x})"
    py = "_xp.sqrt({x})"

    def forward(self, x):
        return cuda.get_array_module(x).sqrt(x)

    def backward(self, gy):
        y = self.outputs[0]()
        return gy / (2 * y)


def sqrt(x):
    return Sqrt()(x)


class Square(Function):
    cpp = "{x} * {x}"
    py = "{x} * {x}"

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
        # `abs` in this module is the dezero function; ask the array module.
        return cuda.get_array_module(x).abs(x)

    def backward(self, gy):
        x, = self.inputs
        return gy * sign(x)


def abs(x):
    return Abs()(x)


class Sign(Function):
    """-1, 0 or 1 by the sign of x; its gradient is zero."""
    # As numpy's sign: -0.0 gives 0 and NaN stays NaN.
    cpp = "({x} > 0) ? 1 : ({x} < 0) ? -1 : ({x} == 0) ? 0 : {x}"

    def forward(self, x):
        return cuda.get_array_module(x).sign(x)

    def backward(self, gy):
        return None


def sign(x):
    return Sign()(x)


class Clip(Function):
    """x limited to [x_min, x_max]; a bound of None is no bound (as in numpy)."""
    # numpy's min(max(x, x_min), x_max), so x_max wins where x_min > x_max; with
    # comparisons rather than fmin/fmax, which would turn NaN into a bound. A None
    # bound is no number, so such a node is never fused.
    cpp = "(({x} < {x_min} ? {x_min} : {x}) > {x_max}) ? {x_max} : " \
          "({x} < {x_min} ? {x_min} : {x})"

    def __init__(self, x_min, x_max):
        self.x_min = x_min
        self.x_max = x_max

    def forward(self, x):
        bounds = [None if c is None else _like(c, x) for c in (self.x_min, self.x_max)]
        return cuda.get_array_module(x).clip(x, *bounds)

    def backward(self, gy):
        x, = self.inputs
        return gy * InRange(self.x_min, self.x_max)(x)


def clip(x, x_min, x_max):
    if x_min is None and x_max is None:
        raise ValueError("clip: x_min and x_max are both None; give at least one bound")
    return Clip(x_min, x_max)(x)


class InRange(Function):
    """1 where x_min <= x <= x_max, else 0 (in x's dtype); a None bound is no bound;
    not differentiable."""
    cpp = "{x} >= {x_min} && {x} <= {x_max}"
    cpp_type = "bool"

    def __init__(self, x_min, x_max):
        self.x_min = x_min
        self.x_max = x_max

    def forward(self, x):
        inside = x == x  # all True but at NaN, which no bound holds
        if self.x_min is not None:
            inside = inside & (x >= self.x_min)
        if self.x_max is not None:
            inside = inside & (x <= self.x_max)
        return inside.astype(x.dtype)

    def backward(self, gy):
        return None


class Equal(Function):
    """1 where x0 == x1, else 0 (in x0's dtype); not differentiable."""
    cpp = "{x0} == {x1}"
    cpp_type = "bool"
    commutative = True

    def forward(self, x0, x1):
        return (x0 == x1).astype(x0.dtype)

    def backward(self, gy):
        return None, None


# =============================================================================
# Shapes: reshape, transpose, get_item, expand_dims, flatten
# =============================================================================


class Reshape(Function):
    py = "{x}.reshape({shape})"

    shapes = staticmethod(_reshaped)

    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        return x.reshape(self.shape)

    def backward(self, gy):
        return reshape(gy, self.inputs[0].shape)


def _shape(op, shape):
    """shape as a tuple of ints; a single int is a 1-d shape, as numpy reads it. A
    symbolic size of a trace stays as it is, so the op records its expression."""
    if isinstance(shape, (int, np.integer, core.TracedSize)):
        shape = (shape,)
    try:
        return tuple(n if isinstance(n, core.TracedSize) else operator.index(n)
                     for n in shape)
    except TypeError:
        raise TypeError(f"{op}: shape must be an int or a tuple of ints, got "
                        f"{shape!r}") from None


def reshape(x, shape):
    shape = _shape("reshape", shape)
    if x.shape == shape:
        return as_variable(x)
    return Reshape(shape)(x)


class Transpose(Function):
    shapes = staticmethod(_transposed)

    @staticmethod
    def py(in_types, out_shape, attrs):
        # The usual case, a plain transpose, is an attribute rather than a call.
        return "{x}.T" if attrs["axes"] is None else "{x}.transpose({axes})"

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

    shapes = staticmethod(_indexed)

    def __init__(self, slices):
        self.slices = slices

    def forward(self, x):
        return x[self.slices]

    def backward(self, gy):
        x, = self.inputs
        return GetItemGrad(self.slices, x.shape)(gy)


class GetItemGrad(Function):
    """Scatter-add gy into zeros of in_shape at slices: the adjoint of GetItem."""

    shapes = staticmethod(_attr_shape("in_shape"))

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
    if not -len(shape) - 1 <= axis <= len(shape):
        raise ValueError(f"expand_dims: axis {axis} is out of range for shape {x.shape}; "
                         f"it must be in {-len(shape) - 1}..{len(shape)}")
    shape.insert(axis if axis >= 0 else len(shape) + axis + 1, 1)
    return reshape(x, tuple(shape))


def flatten(x):
    """(N, ...) -> (N, -1): keep the batch axis, flatten the rest."""
    x = as_variable(x)
    # The size rather than -1, which numpy cannot work out for an empty batch.
    return reshape(x, (x.shape[0], math.prod(x.shape[1:])))


# =============================================================================
# Joining and splitting: concat, stack, split
# =============================================================================


class Concat(Function):
    """y = the inputs joined along axis (numpy's concatenate)."""
    fresh_result = True

    shapes = staticmethod(lambda shapes, attrs: _joined(shapes, attrs["axis"]))

    def __init__(self, axis=0):
        self.axis = axis

    def forward(self, *xs):
        return cuda.get_array_module(xs[0]).concatenate(xs, axis=self.axis)

    def backward(self, gy):
        cuts = list(itertools.accumulate(x.shape[self.axis] for x in self.inputs[:-1]))
        return tuple(split(gy, cuts, self.axis))


def _axis(op, axis, ndim):
    """axis as an index in 0..ndim-1 (a negative one counts from the end)."""
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis!r} is out of range for {ndim}-d arrays; it "
                         f"must be an int in {-ndim}..{ndim - 1}")
    return int(axis) % ndim


def _listed(op, xs):
    """xs (a list or tuple of Variables, arrays and numbers) as operands of one op."""
    if not isinstance(xs, (list, tuple)) or not xs:
        raise TypeError(f"{op}: xs must be a non-empty list of arrays or Variables, got "
                        f"{type(xs).__name__}; pass a list, e.g. {op}([a, b], axis=0)")
    return [as_operand(x, xs[0]) for x in xs]


def concat(xs, axis=0):
    """y = the xs joined along axis; every other axis and the dtypes must agree.

    >>> concat([np.zeros((1, 2)), np.ones((1, 2))]).data
    array([[0., 0.],
           [1., 1.]])
    """
    xs = _listed("concat", xs)
    ndim = xs[0].ndim
    # Compared, never hashed or printed unless refused: a traced symbolic size fixes
    # itself where Python reads it as text or a hash.
    if ndim == 0 or any(x.ndim != ndim for x in xs):
        raise ValueError(f"concat: shapes {_shapes_text(xs)} do not have one number of axes "
                         f"(of at least 1); join values of one ndim: reshape them first, or "
                         f"stack values of one shape along a new axis with stack(xs)")
    axis = _axis("concat", axis, ndim)
    if any(x.shape[:axis] + x.shape[axis + 1:] != xs[0].shape[:axis] + xs[0].shape[axis + 1:]
           for x in xs[1:]):
        raise ValueError(f"concat: shapes {_shapes_text(xs)} differ on an axis other than axis "
                         f"{axis}; only the joined axis may differ (reshape or slice them "
                         f"to agree, or join along another axis)")
    _one_dtype("concat", xs)
    return Concat(axis)(*xs)


def _shapes_text(xs) -> str:
    return ", ".join(str(tuple(x.shape)) for x in xs)


def _one_dtype(op, xs):
    dtypes = sorted({x.dtype.name for x in xs})
    if len(dtypes) > 1:
        raise TypeError(f"{op}: dtypes {', '.join(dtypes)} differ; the joined values must "
                        f"have one dtype: convert them first, e.g. F.astype(x, "
                        f"{xs[0].dtype.name!r})")


def stack(xs, axis=0):
    """y = the xs joined along a new axis at `axis`; they must have one shape and dtype.

    >>> stack([np.zeros(2), np.ones(2)], axis=1).shape
    (2, 2)
    """
    xs = [as_variable(x) for x in _listed("stack", xs)]
    if any(x.shape != xs[0].shape for x in xs[1:]):
        shapes = ", ".join(map(str, sorted({x.shape for x in xs})))  # each once
        raise ValueError(f"stack: shapes {shapes} differ; stacked values must have one "
                         f"shape (to join along an existing axis, use concat)")
    _one_dtype("stack", xs)
    axis = _axis("stack", axis, xs[0].ndim + 1)
    return concat([expand_dims(x, axis) for x in xs], axis)


class Split(Function):
    """ys = x cut along axis before each of `indices`, one or more (numpy's split)."""

    shapes = staticmethod(_split_shapes)

    def __init__(self, indices, axis=0):
        self.indices = indices
        self.axis = axis

    def forward(self, x):
        return tuple(cuda.get_array_module(x).split(x, self.indices, axis=self.axis))

    def backward(self, *gys):
        x, = self.inputs
        bounds = (0, *self.indices, x.shape[self.axis])
        gxs = []
        for gy, start, stop in zip(gys, bounds, bounds[1:]):
            if gy is None:  # a part nobody differentiated: zeros, broadcast from one
                shape = x.shape[:self.axis] + (stop - start,) + x.shape[self.axis + 1:]
                gy = broadcast_to(cuda.get_array_module(x).zeros((), x.dtype), shape)
            gxs.append(gy)
        return concat(gxs, self.axis)


def split(x, sections_or_indices, axis=0):
    """numpy's split: an int n cuts x along axis into n equal parts, a list cuts it
    before each of its indices. Returns a list of Variables.

    >>> [y.shape for y in split(np.zeros((4, 3)), [1])]
    [(1, 3), (3, 3)]
    """
    x = as_variable(x)
    if x.ndim == 0:
        raise ValueError("split: a 0-d x has no axis to cut; reshape it first")
    axis = _axis("split", axis, x.ndim)
    n = x.shape[axis]
    if isinstance(sections_or_indices, (int, np.integer)):
        sections = int(sections_or_indices)
        if sections < 1 or n % sections:
            raise ValueError(
                f"split: axis {axis} of x (shape {x.shape}) has length {n}, which "
                f"{sections} sections do not divide equally; give a number of sections "
                f"that divides {n}, or a list of cut points, e.g. split(x, [{n // 2}])")
        indices = tuple(i * (n // sections) for i in range(1, sections))  # n may be 0
    else:
        try:
            indices = tuple(operator.index(i) for i in sections_or_indices)
        except TypeError:
            raise TypeError(f"split: sections_or_indices must be an int or a list of ints, "
                            f"got {sections_or_indices!r}") from None
        # Negative cut points count from the end, as numpy's; cuts that go back would
        # make parts overlap, which this op (and its gradient) does not do.
        indices = tuple(i + n if i < 0 else i for i in indices)
        if any(not 0 <= i <= n for i in indices) or list(indices) != sorted(indices):
            raise ValueError(f"split: cut points {list(sections_or_indices)} must be "
                             f"increasing and within 0..{n} (axis {axis} of x, shape "
                             f"{x.shape}); sort them, or clip them to the axis")
    if not indices:  # one part, x itself (as reshape to x's own shape gives x)
        return [x]
    return Split(indices, axis)(x)


# =============================================================================
# Selection and triangles: where, tril, triu
# =============================================================================


class Where(Function):
    """y = x where condition is True, else y (numpy's where); condition gets no gradient."""
    cpp = "{condition} ? {x} : {y}"  # a kernel reads a boolean input as bool
    py = "_xp.where({condition}, {x}, {y})"

    def forward(self, condition, x, y):
        return cuda.get_array_module(x).where(condition, x, y)

    def backward(self, gy):
        condition, x, y = self.inputs
        gx = None if isinstance(x, Constant) else _unbroadcast(where(condition, gy, 0), x)
        gy_ = None if isinstance(y, Constant) else _unbroadcast(where(condition, 0, gy), y)
        return None, gx, gy_


def where(condition, x, y):
    """condition ? x : y, elementwise: condition boolean, the three broadcast as numpy's.

    >>> where(np.array([True, False]), np.ones(2), 0.0).data
    array([1., 0.])
    """
    if not hasattr(condition, "dtype"):  # a list or a Python bool; arrays pass (traced too)
        condition = np.asarray(condition)
    if condition.dtype != bool:
        raise TypeError(f"where: condition must be boolean, got dtype {condition.dtype}; "
                        f"compare to make one, e.g. where(mask > 0, x, y)")
    x = as_operand(x, y)
    y = as_operand(y, x)
    try:
        broadcast_shapes(condition.shape, x.shape, y.shape)
    except ValueError:
        raise ValueError(f"where: condition of shape {tuple(condition.shape)}, x of shape "
                         f"{tuple(x.shape)} and y of shape {tuple(y.shape)} do not broadcast "
                         f"together; reshape one (axes of length 1 or missing leading axes "
                         f"broadcast)") from None
    return Where()(condition, x, y)


class Tril(Function):
    """y = x with the elements above its k-th diagonal zeroed (the last two axes)."""

    shapes = staticmethod(_same_shape)

    def __init__(self, k=0):
        self.k = k

    def forward(self, x):
        return cuda.get_array_module(x).tril(x, self.k)

    def backward(self, gy):
        return tril(gy, self.k)


class Triu(Function):
    """y = x with the elements below its k-th diagonal zeroed (the last two axes)."""

    shapes = staticmethod(_same_shape)

    def __init__(self, k=0):
        self.k = k

    def forward(self, x):
        return cuda.get_array_module(x).triu(x, self.k)

    def backward(self, gy):
        return triu(gy, self.k)


def _triangle(op, x, k):
    x = as_variable(x)
    if x.ndim < 2:
        # numpy would broadcast a vector into a matrix, which is seldom what was meant.
        raise ValueError(f"{op}: x must have 2 or more axes (matrices in the last two), got "
                         f"shape {x.shape}; for one matrix of a vector v use v.reshape(1, -1)")
    if not isinstance(k, (int, np.integer)):
        raise TypeError(f"{op}: k must be an int (the diagonal: 0 the main one, 1 above "
                        f"it, -1 below it), got {k!r}")
    return x, int(k)


def tril(x, k=0):
    """x with zeros above its k-th diagonal (k > 0: above the main one), as numpy's tril.

    >>> tril(np.ones((2, 2))).data
    array([[1., 0.],
           [1., 1.]])
    """
    x, k = _triangle("tril", x, k)
    return Tril(k)(x)


def triu(x, k=0):
    """x with zeros below its k-th diagonal (k > 0: above the main one), as numpy's triu.

    >>> triu(np.ones((2, 2))).data
    array([[1., 1.],
           [0., 1.]])
    """
    x, k = _triangle("triu", x, k)
    return Triu(k)(x)


# =============================================================================
# Broadcast and reductions: sum, sum_to, broadcast_to, average, mean, max, min
# =============================================================================


class Sum(Function):
    reduce = "sum"
    py = "{x}.sum(axis={axis}, keepdims={keepdims})"

    shapes = staticmethod(_reduce_shape)

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
    reduce = "sum"

    shapes = staticmethod(_attr_shape("shape"))

    @staticmethod
    def py(in_types, out_shape, attrs):
        # utils.sum_to works out the summed axes at every call; the graph knows both
        # shapes, so the replay code names them once (the same single reduction;
        # _sum is ndarray.sum without its Python-level wrapper).
        ((x_shape, _),), lead = in_types, len(in_types[0][0]) - len(out_shape)
        kept = [i + lead for i, n in enumerate(out_shape) if n == 1 and x_shape[i + lead] != 1]
        axes = tuple(range(lead)) + tuple(kept)
        if not kept:
            return f"_sum({{x}}, axis={axes!r})"
        return f"{{x}}.sum(axis={axes!r}, keepdims=True).reshape({{shape}})"

    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        return utils.sum_to(x, self.shape)

    def backward(self, gy):
        return broadcast_to(gy, self.inputs[0].shape)


def sum_to(x, shape):
    shape = _shape("sum_to", shape)
    if x.shape == shape:
        return as_variable(x)
    return SumTo(shape)(x)


class BroadcastTo(Function):
    py = "_xp.broadcast_to({x}, {shape})"

    shapes = staticmethod(_attr_shape("shape"))

    def __init__(self, shape):
        self.shape = shape

    def forward(self, x):
        return cuda.get_array_module(x).broadcast_to(x, self.shape)

    def backward(self, gy):
        return sum_to(gy, self.inputs[0].shape)


def broadcast_to(x, shape):
    shape = _shape("broadcast_to", shape)
    if x.shape == shape:
        return as_variable(x)
    return BroadcastTo(shape)(x)


def average(x, axis=None, keepdims=False):
    """Mean over axis: sum(x) * (len(y) / len(x)); NaN where x has no elements, as
    numpy and PyTorch give it."""
    x = as_variable(x)
    y = sum(x, axis, keepdims)
    return y * (y.data.size / x.data.size if x.data.size else float("nan"))


mean = average


class Max(Function):
    reduce = "max"

    shapes = staticmethod(_reduce_shape)

    def __init__(self, axis=None, keepdims=False):
        self.axis = axis
        self.keepdims = keepdims

    def forward(self, x):
        return x.max(axis=self.axis, keepdims=self.keepdims)

    def backward(self, gy):
        return _extreme_backward(self, gy)


class Min(Max):
    reduce = "min"

    def forward(self, x):
        return x.min(axis=self.axis, keepdims=self.keepdims)


def _extreme_backward(f, gy):
    # Positions tied for the extreme share the gradient equally (PyTorch's amax):
    # the gradient of a reduction sums to gy, as for any other choice of one.
    x, = f.inputs
    y = f.outputs[0]()
    shape = utils.max_backward_shape(x, f.axis)
    mask = Equal()(x, broadcast_to(reshape(y, shape), x.shape))
    ties = sum(mask, axis=f.axis, keepdims=True)
    return broadcast_to(reshape(gy, shape) / ties, x.shape) * mask


def max(x, axis=None, keepdims=False):
    return Max(tuple(axis) if isinstance(axis, list) else axis, keepdims)(x)


def min(x, axis=None, keepdims=False):
    return Min(tuple(axis) if isinstance(axis, list) else axis, keepdims)(x)


# =============================================================================
# Matrix products: matmul, rmatmul, linear
# =============================================================================


def _check_matmul(op, x, W):
    if x.ndim < 2 or W.ndim < 2 or x.shape[-1] != W.shape[-2]:
        raise ValueError(
            f"{op}: cannot multiply shapes {x.shape} and {W.shape}; the last axis of x "
            f"must equal the second-to-last axis of W, and both need ndim >= 2 "
            f"(reshape a vector v to (1, n) with v.reshape(1, -1))")


def _cut_product(f, types) -> list:
    """The result type of a product op f (Function.types): forward on zeros of these
    types, the axis x and W share cut to one entry, which gives the same shape and
    dtype without multiplying the whole (load() checks a graph file by it)."""
    x, W, *b = [np.broadcast_to(np.zeros((), dtype), shape) for shape, dtype in types]
    if x.ndim >= 2 and W.ndim >= 2 and x.shape[-1] == W.shape[-2] > 1:
        x, W = x[..., :1], W[..., :1, :]
    y = f.forward(x, W, *b)
    return [(y.shape, y.dtype)]


class MatMul(Function):
    op_name = "matmul"
    py = "{x} @ {W}"
    fresh_result = True
    types = staticmethod(lambda types, attrs: _cut_product(MatMul(), types))

    shapes = staticmethod(_product)

    def forward(self, x, W):
        _check_matmul(self.op_name, x, W)
        try:
            return x @ W
        except ValueError:  # the last two axes fit (checked): the batch axes do not
            raise ValueError(
                f"{self.op_name}: the batch axes (all but the last two) of shapes {x.shape} "
                f"and {W.shape} do not broadcast together; make them equal, or 1 where "
                f"one side is shared, e.g. x.reshape(2, 1, 4, 5) @ W of (3, 5, 6)") from None

    def backward(self, gy):
        x, W = self.inputs
        gx = None if isinstance(x, Constant) else _unbroadcast(matmul(gy, _swap_last(W)), x)
        gW = None if isinstance(W, Constant) else _unbroadcast(matmul(_swap_last(x), gy), W)
        return gx, gW


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
    py = {2: "{x} @ {W}", 3: "{x} @ {W} + {b}"}  # by the number of inputs
    fresh_result = True
    # The passes split a call with b into linear(x, W) then add(y, b), which is what
    # forward computes, so that the add fuses with the elementwise ops after it.
    epilogue = staticmethod(lambda x, W, b: ("add", (*x[:-1], W[-1])))
    types = staticmethod(lambda types, attrs: _cut_product(Linear(), types))

    shapes = staticmethod(_linear_shape)

    def forward(self, x, W, b=None):
        _check_matmul(self.op_name, x, W)
        if W.ndim != 2:
            raise ValueError(f"linear: W must be 2-d (in, out), got shape {W.shape}; "
                             f"use matmul for a batch of weight matrices")
        y = x @ W
        return y if b is None else y + b

    def backward(self, gy):
        x, W = self.inputs[:2]
        # A raw input batch (a Constant) needs no gradient: skipping it saves a
        # matmul as large as the forward one.
        gx = None if isinstance(x, Constant) else matmul(gy, W.T)
        gW = None if isinstance(W, Constant) else matmul(_rows(x).T, _rows(gy))
        if len(self.inputs) == 2:
            return gx, gW
        return gx, gW, sum_to(gy, self.inputs[2].shape)


def _rows(x):
    # Leading axes (N, T, ...) are all batch: flattened into rows, x.T @ gy sums
    # over every row and gives gW the shape of W.
    # The row count rather than -1, which numpy cannot work out for an empty x.
    return x if x.ndim == 2 else reshape(x, (math.prod(x.shape[:-1]), x.shape[-1]))


def linear(x, W, b=None):
    if b is None:
        return Linear()(x, W)
    return Linear()(x, W, b)


# =============================================================================
# Activations: sigmoid, relu, leaky_relu, softmax, log_softmax, softplus, gelu, silu
# =============================================================================


class Sigmoid(Function):
    """y = 1 / (1 + exp(-x)), computed as 0.5 * tanh(0.5 * x) + 0.5 (no overflow)."""
    cpp = "tanh({x} * 0.5) * 0.5 + 0.5"
    py = "_xp.tanh({x} * 0.5) * 0.5 + 0.5"

    def forward(self, x):
        half = _like(0.5, x)
        return cuda.get_array_module(x).tanh(x * half) * half + half

    def backward(self, gy):
        y = self.outputs[0]()
        return gy * y * (1 - y)


def sigmoid(x):
    """1 / (1 + exp(-x)), elementwise and stable for large |x|.

    >>> float(sigmoid(np.array(0.0)).data)
    0.5
    """
    return Sigmoid()(x)


class ReLU(Function):
    op_name = "relu"
    cpp = "({x} <= 0) ? 0 : {x}"  # as numpy's maximum: NaN stays NaN, -0.0 gives 0
    py = "_xp.maximum({x}, 0)"

    def forward(self, x):
        return cuda.get_array_module(x).maximum(x, _like(0, x))

    def backward(self, gy):
        # The mask from the output (y > 0 exactly where x > 0): a traced step then
        # keeps y alone alive, and a kernel computing y + b then relu writes y only.
        y = self.outputs[0]()
        return gy * Positive()(y)


class Positive(Function):
    """1 where x > 0, else 0 (in x's dtype): the derivative of relu; not differentiable."""
    cpp = "{x} > 0"
    cpp_type = "bool"

    def forward(self, x):
        return (x > 0).astype(x.dtype)

    def backward(self, gy):
        return None


def relu(x):
    """max(x, 0), elementwise.

    >>> relu(np.array([-1.0, 2.0])).data
    array([0., 2.])
    """
    return ReLU()(x)


class LeakyReLU(Function):
    op_name = "leaky_relu"
    cpp = "({x} > 0) ? {x} : {x} * {slope}"

    def __init__(self, slope):
        self.slope = slope

    def forward(self, x):
        return cuda.get_array_module(x).where(x > 0, x, x * _like(self.slope, x))

    def backward(self, gy):
        x, = self.inputs
        return gy * LeakyReLUGrad(self.slope)(x)


class LeakyReLUGrad(Function):
    """1 where x > 0, else slope (in x's dtype); not differentiable."""
    op_name = "leaky_relu_grad"
    cpp = "({x} > 0) ? 1 : {slope}"

    def __init__(self, slope):
        self.slope = slope

    def forward(self, x):
        # Both branches in x's dtype, so that no float64 array appears for float32 x.
        return cuda.get_array_module(x).where(x > 0, _like(1, x), _like(self.slope, x))

    def backward(self, gy):
        return None


def leaky_relu(x, slope=0.2):
    """x where x > 0, else slope * x.

    >>> leaky_relu(np.array([-1.0, 2.0])).data
    array([-0.2,  2. ])
    """
    return LeakyReLU(slope)(x)


def _row_parts(axis):
    """The max over `axis` of x, the shift d = x - max, e = exp(d) and its sum s: the
    steps softmax, log_softmax and softmax_cross_entropy begin with (Function.parts)."""
    rows = {"axis": axis, "keepdims": True}
    return [("m", "max", ("x",), rows), ("d", "sub", ("x", "m"), {}),
            ("e", "exp", ("d",), {}), ("s", "sum", ("e",), rows)]


class Softmax(Function):
    # In a traced graph on the CPU, softmax is split into the steps of its forward
    # and fused into one kernel of three passes over each row (max, exp-sum, quotient).
    parts = staticmethod(lambda shapes, attrs: (
        _row_parts(attrs["axis"]) + [("y", "div", ("e", "s"), {})], ("y",)))

    shapes = staticmethod(_same_shape)

    def __init__(self, axis=1):
        self.axis = axis

    def forward(self, x):
        xp = cuda.get_array_module(x)
        # Shifting by the max keeps exp from overflowing; the result is unchanged.
        y = xp.exp(x - x.max(axis=self.axis, keepdims=True))
        return y / y.sum(axis=self.axis, keepdims=True)

    def backward(self, gy):
        y = self.outputs[0]()
        gx = y * gy
        return gx - y * sum(gx, axis=self.axis, keepdims=True)


def softmax(x, axis=1):
    """exp(x) / sum(exp(x), axis), without overflow.

    >>> softmax(np.array([[0.0, 0.0]])).data
    array([[0.5, 0.5]])
    """
    return Softmax(axis)(x)


class LogSoftmax(Function):
    parts = staticmethod(lambda shapes, attrs: (_row_parts(attrs["axis"]) + [
        ("l", "log", ("s",), {}), ("y", "sub", ("d", "l"), {})], ("y",)))

    shapes = staticmethod(_same_shape)

    def __init__(self, axis=1):
        self.axis = axis

    def forward(self, x):
        xp = cuda.get_array_module(x)
        # The max is subtracted first: x - (m + log s) would round m + log s to the
        # spacing of m (0.008 in float32 at 1e5) before the difference.
        shifted = x - x.max(axis=self.axis, keepdims=True)
        return shifted - xp.log(xp.exp(shifted).sum(axis=self.axis, keepdims=True))

    def backward(self, gy):
        y = self.outputs[0]()
        return gy - exp(y) * sum(gy, axis=self.axis, keepdims=True)


def log_softmax(x, axis=1):
    """x - logsumexp(x, axis): the log of softmax, stable for large logits.

    >>> log_softmax(np.array([[1000.0, 1000.0]])).data
    array([[-0.69314718, -0.69314718]])
    """
    return LogSoftmax(axis)(x)


class Softplus(Function):
    """y = log(1 + exp(x)), elementwise."""
    cpp = "fmax({x}, 0) + log1p(exp(-fabs({x})))"

    def forward(self, x):
        return cuda.get_array_module(x).logaddexp(_like(0, x), x)

    def backward(self, gy):
        x, = self.inputs
        return gy * sigmoid(x)


def softplus(x):
    """log(1 + exp(x)), elementwise and stable for large |x|.

    >>> softplus(np.array([0.0])).data
    array([0.69314718])
    """
    return Softplus()(x)


def gelu(x, approximate="none"):
    """x * Phi(x), Phi the normal distribution's CDF: 0.5 x (1 + erf(x / sqrt(2))), or
    with approximate="tanh" 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as PyTorch.

    >>> gelu(np.array([0.0, 1.0])).data.round(4)
    array([0.    , 0.8413])
    """
    x = as_variable(x)
    if approximate == "none":
        return 0.5 * x * (1 + erf(x * (1 / math.sqrt(2))))
    if approximate == "tanh":
        return 0.5 * x * (1 + tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    raise ValueError(f"gelu: approximate must be 'none' (the erf form) or 'tanh', got "
                     f"{approximate!r}")


def silu(x):
    """x * sigmoid(x), elementwise (also called swish).

    >>> silu(np.array([0.0, 1.0])).data.round(4)
    array([0.    , 0.7311])
    """
    x = as_variable(x)
    return x * sigmoid(x)


# =============================================================================
# Attention: scaled_dot_product_attention
# =============================================================================


def scaled_dot_product_attention(q, k, v, mask=None, is_causal=False, dropout_p=0.0):
    """softmax(q @ k^T / sqrt(d) where mask, else -inf) @ v on (..., T, d) arrays, as
    PyTorch's: mask True where a query attends to a key, is_causal to the keys up to its
    position (a query with none gets zeros); dropout_p drops weights in training.

    >>> scaled_dot_product_attention(np.ones((1, 2)), np.ones((2, 2)), np.eye(2)).data
    array([[0.5, 0.5]])
    """
    op = "scaled_dot_product_attention"
    q, k, v = as_variable(q), as_variable(k), as_variable(v)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[-1] != k.shape[-1] or \
            k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{op}: q of shape {q.shape}, k of shape {k.shape} and v of shape "
                         f"{v.shape} do not fit (..., T, d) arrays where q and k share d, "
                         f"the last axis, and k and v the keys, the second-to-last; reshape "
                         f"them, e.g. (batch, heads, T, d)")
    if not 0 <= dropout_p < 1:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p}")
    scores = matmul(q, _swap_last(k)) * (1 / math.sqrt(q.shape[-1]))
    if is_causal:
        if mask is not None:
            raise ValueError(f"{op}: give mask or is_causal, not both; for both, pass "
                             f"mask & np.tri({scores.shape[-2]}, {scores.shape[-1]}, "
                             f"dtype=bool)")
        mask = _causal_mask(cuda.get_array_module(q), *scores.shape[-2:])
    if mask is not None:
        mask = _attention_mask(op, mask, scores.shape)
        # The lowest number rather than -inf: a row with no key left then has no
        # -inf - (-inf) = NaN in its softmax, and the second where gives it zeros.
        # A scalar of the scores' dtype: numpy 1.x widens float32 to hold the Python
        # float -3.4028235e38.
        scores = where(mask, scores, np.finfo(scores.dtype).min)
    weights = softmax(scores, axis=-1)
    if mask is not None:
        weights = where(mask, weights, 0.0)
    if dropout_p:
        weights = dropout(weights, dropout_p)
    return matmul(weights, v)


def _causal_mask(xp, queries, keys):
    """np.tri(queries, keys) of bools; where a trace keeps a size symbolic, the lower
    triangle of ones broadcast to it (ops with shape rules), which np.tri would fix."""
    if not isinstance(queries, core.TracedSize) and not isinstance(keys, core.TracedSize):
        return xp.tri(queries, keys, dtype=bool)
    return tril(broadcast_to(xp.ones((1, 1), bool), (queries, keys)))


def _attention_mask(op, mask, shape):
    if not hasattr(mask, "dtype"):  # a list; arrays pass (traced too)
        mask = np.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"{op}: mask must be boolean (True: attend), got dtype {mask.dtype}; "
                        f"make one, e.g. mask = m > 0, or add a float mask to the scores "
                        f"of a composed attention")
    try:
        fits = broadcast_shapes(tuple(mask.shape), shape) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{op}: mask of shape {tuple(mask.shape)} does not broadcast to the "
                         f"scores' shape {shape} (..., queries, keys); give it shape "
                         f"{shape[-2:]} or another that broadcasts to {shape}")
    return mask


# =============================================================================
# Losses: softmax_cross_entropy, sigmoid_cross_entropy, binary_cross_entropy,
#         mean_squared_error, and the labels' helpers OneHot, AsType
# =============================================================================


class AsType(Function):
    """y = x as another dtype; the gradient goes back in x's dtype (none for integers)."""
    op_name = "astype"

    shapes = staticmethod(_same_shape)

    def __init__(self, dtype):
        self.dtype = dtype

    def forward(self, x):
        return x.astype(self.dtype)

    def backward(self, gy):
        x, = self.inputs
        if x.dtype.kind not in "fc":
            return None
        return AsType(x.dtype.name)(gy)


def astype(x, dtype):
    """x converted to `dtype` (a recorded op, so traces see it)."""
    x = as_variable(x)
    dtype = np.dtype(dtype).name
    if x.dtype == dtype:
        return x
    return AsType(dtype)(x)


class OneHot(Function):
    """Rows of the identity of size num_classes picked by integer labels t. Ids out
    of range raise, naming `labels_of` (the op whose labels they are); None: an op
    that read the same labels checked them already (softmax_cross_entropy's
    backward)."""

    shapes = staticmethod(lambda shapes, attrs: [tuple(shapes[0]) + (attrs['num_classes'],)])

    def __init__(self, num_classes, dtype, labels_of="one_hot"):
        self.num_classes = num_classes
        self.dtype = dtype
        self.labels_of = labels_of

    @staticmethod
    def py(in_types, out_shape, attrs):
        # The replay code writes rows of a cached identity (_eye) only for labels
        # checked already; otherwise it calls forward, which checks them each call.
        return None if attrs["labels_of"] is not None else "_eye({num_classes}, {dtype})[{t}]"

    def forward(self, t):
        if self.labels_of is not None:
            _check_class_ids(self.labels_of, t, self.num_classes)
        xp = cuda.get_array_module(t)
        return xp.eye(self.num_classes, dtype=self.dtype)[t]

    def backward(self, gy):
        return None


def _per_example(x):
    """1 / N, the scale of a loss summed over a batch of N = len(x) examples (a 0-d x
    is one example); NaN for an empty batch, as numpy's and PyTorch's means give.
    (x.shape[0] rather than len(x): a symbolic batch size stays symbolic.)"""
    n = x.shape[0] if x.ndim else 1
    return 1 / n if n else float("nan")


class SizeNumber(Function):
    """y = value, a number computed from sizes (1 / B for a mean over B rows), as a 0-d
    array of dtype on like's device. A graph of symbolic sizes computes it at each
    replay from the sizes of the call; like gives only the device."""

    shapes = staticmethod(lambda shapes, attrs: [()])
    device_only = True
    py = "_xp.asarray({value}, dtype={dtype})"

    def __init__(self, value, dtype):
        self.value = value
        self.dtype = dtype

    def forward(self, like):
        return cuda.get_array_module(like).asarray(self.value, dtype=self.dtype)

    def backward(self, gy):
        return None


def _check_labels(op, x, t):
    if x.ndim != 2:
        raise ValueError(f"{op}: x must be 2-d scores of shape (N, classes), got shape "
                         f"{x.shape}; reshape it, e.g. x.reshape(len(x), -1)")
    if t.dtype.kind not in "iu":
        raise TypeError(f"{op}: t must hold integer class labels, got dtype {t.dtype}; "
                        f"convert it, e.g. t.astype(np.int64)")
    if t.size != x.shape[0]:
        raise ValueError(f"{op}: {x.shape[0]} rows of scores but {t.size} labels "
                         f"(t has shape {t.shape}); give one label per row")


def _check_class_ids(op, t, classes, of="classes"):
    # numpy would read a negative id from the end (-1 is the last class) and a
    # label past the end raises an IndexError that names no op.
    if t.size == 0:
        return
    low, high = int(t.min()), int(t.max())
    if low < 0 or high >= classes:
        raise IndexError(f"{op}: id {low if low < 0 else high} is out of range for "
                         f"{classes} {of}; ids must be in 0..{classes - 1}")


def _cross_entropy_parts(shapes, attrs):
    # SoftmaxCrossEntropy.forward's steps: the loss's pick of each row's label is a
    # fold over the row (pick_labels), so one kernel computes loss and probabilities.
    n = shapes[0][0] if shapes[0] else 1
    return _row_parts(1) + [
        ("p", "div", ("e", "s"), {}), ("g", "pick_labels", ("d", "t"), {}),
        ("l", "log", ("s",), {}), ("q", "sub", ("g", "l"), {}),
        ("u", "sum", ("q",), {"axis": None, "keepdims": False}), ("v", "neg", ("u",), {}),
        ("loss", "mul", ("v", 1 / n if n else float("nan")), {})], ("loss", "p")


class SoftmaxCrossEntropy(Function):
    """Mean over the batch of -log softmax(x)[i, t[i]]; x: (N, C), t: (N,) integers.
    Outputs the loss and softmax(x), the probabilities its backward reads."""
    parts = staticmethod(_cross_entropy_parts)

    shapes = staticmethod(lambda shapes, attrs: [(), shapes[0]])

    def forward(self, x, t):
        _check_labels(self.op_name, x, t)
        _check_class_ids(self.op_name, t, x.shape[1])
        xp = cuda.get_array_module(x)
        # log softmax only where the labels pick it: x[i, t[i]] - log s[i], with
        # s[i] = sum(exp(x[i] - max x[i])); the max goes first, as in LogSoftmax:
        # (x - m) - log s, not x - (m + log s). The probabilities are Softmax's
        # forward, bit for bit, so the backward need not compute softmax again.
        shifted = x - x.max(axis=1, keepdims=True)
        y = xp.exp(shifted)
        s = y.sum(axis=1, keepdims=True)
        picked = shifted[xp.arange(len(x)), t.ravel()] - xp.log(s[:, 0])
        # Scaled by a scalar of x's dtype: the loss keeps float32 on numpy 1.x too.
        return -picked.sum() * x.dtype.type(_per_example(x)), y / s

    def backward(self, gy, gp):
        x, t = self.inputs
        # The probabilities live while a trace records, or while a reader of them
        # does; in eager code nobody keeps them, and softmax(x) gives the same bits.
        p = self.outputs[1]()
        p = softmax(x, axis=1) if p is None else p
        gx = None
        if gy is not None:
            gx = SoftmaxCrossEntropyGrad()(p, t, gy * _per_example(x))
        if gp is not None:  # a gradient reaching the probabilities (double backprop)
            gp = p * gp
            gp = gp - p * sum(gp, axis=1, keepdims=True)
            gx = gp if gx is None else gx + gp
        return gx, None


class SoftmaxCrossEntropyGrad(Function):
    """gx = (p - one_hot(t)) * c: softmax_cross_entropy's gradient from its
    probabilities p, labels t and scale c (the loss's gradient over N), in one op
    rather than a one-hot matrix, a subtraction and a product."""
    # In a kernel over rows (the forward's), `_r` is the column: p - 1 where t picks.
    cpp = "({p} - ({t} == _r ? 1 : 0)) * {c}"
    labels = "t"

    shapes = staticmethod(_same_shape)

    def forward(self, p, t, c):
        xp = cuda.get_array_module(p)
        if cuda.get_array_module(t) is not xp:  # core names the argument on the other device
            raise TypeError(f"{self.op_name}: probabilities and labels on two devices")
        gx = p.copy()
        gx[xp.arange(len(p)), t.ravel()] -= 1  # p - 1 where t picks
        return gx * c

    def backward(self, ggx):
        p, t, c = self.inputs
        n, classes = p.shape
        t_onehot = OneHot(classes, p.dtype.name, None)(reshape(t, (n,)))
        return ggx * c, None, sum_to(ggx * (p - t_onehot), c.shape)


class PickLabels(Function):
    """y[i, 0] = x[i, t[i]]: each row's entry at its label (x: (N, C), t: (N,)
    integers); a step of softmax_cross_entropy's forward (Function.parts), which a
    kernel folds over each row like a reduction."""
    reduce = "pick"
    labels = "t"

    shapes = staticmethod(lambda shapes, attrs: [(shapes[0][0], 1)])

    def forward(self, x, t):
        _check_class_ids(self.op_name, t, x.shape[1])
        return x[cuda.get_array_module(x).arange(len(x)), t.ravel()][:, None]

    def backward(self, gy):
        x, t = self.inputs
        n, classes = x.shape
        hot = OneHot(classes, x.dtype.name, None)(reshape(t, (n,)))
        return hot * reshape(gy, (n, 1)), None


def softmax_cross_entropy(x, t, ignore_index=None):
    """mean_i(-log softmax(x)[i, t[i]]) for scores x (N, C) and integer labels t (N,), or
    x (..., C) and t (...), each row of C a case; the mean leaves out labels equal to
    ignore_index, as PyTorch's cross_entropy(x.reshape(-1, C), t.reshape(-1), ...).

    >>> float(softmax_cross_entropy(np.zeros((2, 4)), np.array([0, 3])).data)  # log 4
    1.3862943611198906
    """
    x, = _floating(_given("softmax_cross_entropy", "x", x))
    t = _given("softmax_cross_entropy", "t", t)
    if x.ndim > 2:  # a batch of sequences: every position is a row of scores
        if tuple(t.shape) != x.shape[:-1]:
            raise ValueError(
                f"softmax_cross_entropy: scores of shape {x.shape} need one label per row "
                f"of their last axis, labels of shape {x.shape[:-1]}; got labels of shape "
                f"{tuple(t.shape)}: reshape them, e.g. t.reshape{x.shape[:-1]}")
        rows = math.prod(x.shape[:-1])
        x, t = reshape(x, (rows, x.shape[-1])), reshape(t, (rows,))
    if ignore_index is None:
        loss, _ = SoftmaxCrossEntropy()(x, t)
        return loss
    _check_labels("softmax_cross_entropy", x, t)
    labels = np.iinfo(t.dtype)
    # A float or a str matched no label, in silence; -100 beside uint8 labels failed on
    # an OverflowError naming no op.
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)) \
            or not labels.min <= ignore_index <= labels.max:
        raise TypeError(f"softmax_cross_entropy: ignore_index must be an int that labels of "
                        f"dtype {t.dtype} can hold, got {ignore_index!r}; e.g. -100 with "
                        f"t.astype(np.int64)")
    n, classes = x.shape
    t = reshape(t, (n, 1))
    with no_grad():  # 1 for each label that counts, 0 for an ignored one
        kept = 1 - astype(Equal()(t, as_operand(ignore_index, t)), x.dtype.name)
    picked = PickLabels()(log_softmax(x, axis=1), IgnoreLabels(ignore_index, classes)(t))
    return -sum(picked * kept) / sum(kept)


class IgnoreLabels(Function):
    """t with each label equal to ignore_index set to 0 (any class would do: its loss is
    multiplied by 0), the others checked to be ids of softmax_cross_entropy's classes."""

    shapes = staticmethod(_same_shape)

    def __init__(self, ignore_index, classes):
        self.ignore_index = ignore_index
        self.classes = classes

    def forward(self, t):
        labels = cuda.get_array_module(t).where(t == self.ignore_index, t.dtype.type(0), t)
        _check_class_ids("softmax_cross_entropy", labels, self.classes)
        return labels

    def backward(self, gy):
        return None


def _labels_like(t, x):
    # Targets enter the arithmetic in x's dtype: int64 labels must not turn a
    # float32 loss into float64.
    t = as_variable(t)
    if t.dtype != x.dtype:
        t = AsType(x.dtype.name)(t)
    return t


def _given(op, what, x):
    """x as a Variable of numbers, or a TypeError naming op and what x was: None (a
    target left out) or a string otherwise failed further in on a missing attribute."""
    if isinstance(x, (bool, int, float, complex, np.generic)):
        x = np.asarray(x)
    data = x.data if isinstance(x, Variable) else x
    dtype = getattr(data, "dtype", None)  # an array's, or the tracer's guard of one
    if isinstance(dtype, np.dtype) and dtype.kind in "biufc":
        return as_variable(x)
    given = ("a Variable holding " if isinstance(x, Variable) else "") + (
        "None" if data is None else f"an array of dtype {dtype}" if dtype is not None
        else f"a {type(data).__name__} ({repr(data)[:40]})")
    raise TypeError(f"{op}: {what} is {given}; it takes a Variable or an array of numbers, "
                    f"e.g. np.asarray({what}, dtype=np.float32) (class labels: np.int64)")


def _floating(*xs):
    """xs with integer or bool values cast to a float dtype: the dtype of a float
    one among them, else float64. Losses scale by 1 / N, which integers would
    round to 0 (or truncate)."""
    xs = [as_variable(x) for x in xs]
    floats = [x.dtype for x in xs if x.dtype.kind in "fc"]
    dtype = floats[0] if floats else np.dtype(np.float64)
    return [x if x.dtype.kind in "fc" else AsType(dtype.name)(x) for x in xs]


def _paired(op, x, t, what):
    """t in x's shape when the two differ only by axes of length 1 that broadcasting
    would not multiply ((1, 1) and (1,), as the book's RNN example passes them);
    any other difference raises (see _check_same_shape)."""
    if x.shape != t.shape and x.size == t.size:
        try:
            paired_size = int(np.prod(np.broadcast_shapes(x.shape, t.shape)))
        except ValueError:
            paired_size = None
        if paired_size == x.size:
            t = reshape(t, x.shape)
    _check_same_shape(op, x, t, what)
    return t


def _check_same_shape(op, x, t, what):
    if x.shape != t.shape:
        raise ValueError(
            f"{op}: x has shape {x.shape} but {what} has shape {t.shape}; they must match "
            f"(they are not broadcast, which would silently pair every x with every "
            f"target); reshape one of them, e.g. t.reshape({x.shape})")


def _targets(op, x, t):
    """t in x's shape when the two differ only by axes of length 1 (labels (N,) for
    logits (N, 1), as in the book); any other difference raises, even where the
    sizes agree ((3, 2, 1) against (2, 3) would pair unrelated elements)."""
    t = as_variable(t)
    if x.shape != t.shape and \
            [n for n in x.shape if n != 1] == [n for n in t.shape if n != 1]:
        t = reshape(t, x.shape)
    _check_same_shape(op, x, t, "t")
    return _labels_like(t, x)


def sigmoid_cross_entropy(x, t):
    """Binary cross entropy of logits x against targets t in {0, 1}, summed and divided
    by N = len(x): sum(softplus(x) - t * x) / N, stable for large |x|.

    >>> float(sigmoid_cross_entropy(np.zeros((2, 1)), np.array([[0], [1]])).data)  # log 2
    0.6931471805599453
    """
    x, = _floating(_given("sigmoid_cross_entropy", "x", x))
    t = _targets("sigmoid_cross_entropy", x, _given("sigmoid_cross_entropy", "t", t))
    return sum(softplus(x) - t * x) * _per_example(x)


class Probabilities(Function):
    """p itself, once checked to hold probabilities (values in [0, 1]): an op, so
    that a replayed trace checks the values of every call, not of the first."""

    shapes = staticmethod(_same_shape)

    def forward(self, p):
        if p.size and not (p.min() >= 0 and p.max() <= 1):  # NaN fails both
            raise ValueError(f"probabilities: p of binary_cross_entropy must hold values "
                             f"in [0, 1], got values in [{p.min()}, {p.max()}]; pass logits "
                             f"to sigmoid_cross_entropy, or squash p with sigmoid first")
        return p.view()

    def backward(self, gy):
        return gy


def binary_cross_entropy(p, t):
    """Cross entropy of probabilities p against targets t in {0, 1}, summed and divided
    by N = len(p): -sum(t log p + (1 - t) log(1 - p)) / N. The logs are taken of
    values clipped to at least 1e-15 so that p = 0 or 1 gives a finite loss.

    >>> float(binary_cross_entropy(np.array([0.5, 0.5]), np.array([0, 1])).data)  # log 2
    0.6931471805599453
    """
    p, = _floating(_given("binary_cross_entropy", "p", p))
    t = _targets("binary_cross_entropy", p, _given("binary_cross_entropy", "t", t))
    p = Probabilities()(p)
    log_p = log(clip(p, 1e-15, 1.0))
    log_q = log(clip(1 - p, 1e-15, 1.0))
    return -sum(t * log_p + (1 - t) * log_q) * _per_example(p)


class MeanSquaredError(Function):
    """sum((x0 - x1) ** 2) / len(x0): the book's mean over the batch axis."""

    shapes = staticmethod(lambda shapes, attrs: [()])

    def forward(self, x0, x1):
        _check_same_shape(self.op_name, x0, x1, "x1")
        diff = x0 - x1
        # A numpy scalar of x0's dtype: float32 * python float would be float64 on numpy 1.x.
        return (diff * diff).sum() * x0.dtype.type(_per_example(diff))

    def backward(self, gy):
        x0, x1 = self.inputs
        gx0 = (x0 - x1) * (gy * (2 * _per_example(x0)))
        return gx0, -gx0


def mean_squared_error(x0, x1):
    """sum((x0 - x1) ** 2) / len(x0); x0 and x1 must have the same shape (up to axes
    of length 1 that pair the same elements, like (1, 1) and (1,)). 0-d inputs are one
    example; an empty batch gives NaN, as in PyTorch (so do the other losses).

    >>> float(mean_squared_error(np.array([[1.0], [3.0]]), np.array([[0.0], [0.0]])).data)
    5.0
    """
    x0 = _given("mean_squared_error", "x0", x0)
    x0, x1 = _floating(x0, _given("mean_squared_error", "x1", as_operand(x1, x0)))
    x1 = _paired("mean_squared_error", x0, x1, "x1")
    return MeanSquaredError()(x0, x1)


# =============================================================================
# Metrics and regularisation: accuracy, dropout
# =============================================================================


class Accuracy(Function):
    """The fraction of rows of y whose argmax equals the label t.

    It is piecewise constant in y, so its gradient is zero: backward gives none."""

    shapes = staticmethod(lambda shapes, attrs: [()])

    def forward(self, y, t):
        _check_class_ids(self.op_name, t, y.shape[1])
        pred = y.argmax(axis=1).reshape(t.shape)
        dtype = y.dtype if y.dtype.kind == "f" else np.float64
        return (pred == t).mean(dtype=dtype)

    def backward(self, gy):
        return None, None


def accuracy(y, t):
    """Fraction of correct predictions: mean(argmax(y, axis=1) == t), as a Variable.

    >>> float(accuracy(np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1])).data)
    0.5
    """
    y, t = _given("accuracy", "y", y), _given("accuracy", "t", t)
    if y.ndim < 2 or t.size != y.shape[0]:
        raise ValueError(f"accuracy: y of shape {y.shape} needs one label per row, "
                         f"got t of shape {t.shape}")
    return Accuracy()(y, t)


class DropoutMask(Function):
    """A fresh random mask shaped like x: 0 with probability ratio, else 1 / (1 - ratio)."""
    random = True

    shapes = staticmethod(_same_shape)

    def __init__(self, ratio):
        self.ratio = ratio

    def forward(self, x):
        xp = cuda.get_array_module(x)
        keep = xp.asarray(cuda.random_of(xp).rand(*x.shape) > self.ratio)  # a bool for 0-d x
        # The scale keeps each element's expected value: E[x * mask] = x.
        return keep.astype(x.dtype) * _like(1 / (1 - self.ratio), x)

    def backward(self, gy):
        return None


def dropout(x, dropout_ratio=0.5):
    """In training, x * mask with mask 0 (probability dropout_ratio) or
    1 / (1 - dropout_ratio); x unchanged when dezero.Config.train is False.

    >>> with dezero.test_mode(): dropout(np.ones(3)).data
    array([1., 1., 1.])
    """
    x = as_variable(x)
    if not 0 <= dropout_ratio < 1:
        raise ValueError(f"dropout: dropout_ratio must be in [0, 1), got {dropout_ratio}")
    if not Config.train:
        return x
    return x * DropoutMask(dropout_ratio)(x)


# =============================================================================
# Normalisation and lookup: batch_norm (batch_nrom), layer_norm, embed_id
# =============================================================================


def batch_norm(x, gamma, beta, mean, var, decay=0.9, eps=2e-5):
    """Batch normalisation over every axis but axis 1 (the features or channels):
    y = gamma * (x - mu) / sqrt(sigma2 + eps) + beta.

    In training (dezero.Config.train) mu and sigma2 are the batch's mean and
    variance, and the running statistics (shape (C,)) are updated:
        mean <- decay * mean + (1 - decay) * mu
        var  <- decay * var + (1 - decay) * sigma2 * m / max(m - 1, 1)
    with m the number of values per feature (the running variance is unbiased,
    as in the book, Chainer and PyTorch). One value per channel (m = 1) has
    variance 0: the output is beta, as in the book and Chainer, and a RuntimeWarning
    says so. A Variable gets its new value assigned to `.data`, which a traced step
    sees as a state write; an array is updated in place, as the book does, which
    only eager mode allows (a trace raises TraceError). In test mode `mean` and
    `var` are used as they are.
    gamma and beta: shape (C,).

    >>> with dezero.test_mode(): batch_norm(np.ones((1, 2)), np.ones(2), np.zeros(2),
    ...     np.ones(2), np.zeros(2)).data.round(3)
    array([[0., 0.]])
    """
    x = as_variable(x)
    if x.ndim < 2:
        raise ValueError(f"batch_norm: x must have a batch axis and a feature axis, "
                         f"got shape {x.shape}")
    channels = x.shape[1]
    for name, v in (("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var)):
        if tuple(v.shape) != (channels,):
            raise ValueError(f"batch_norm: {name} must have shape ({channels},) for x of "
                             f"shape {x.shape}, got {tuple(v.shape)}")
    axes = (0,) + tuple(range(2, x.ndim))
    # (C,) -> (1, C, 1, ...) so that the per-channel values broadcast against x.
    stat_shape = (1, channels) + (1,) * (x.ndim - 2)

    if not Config.train:
        mu = reshape(as_variable(mean), stat_shape)
        inv_std = reshape((as_variable(var) + eps) ** -0.5, stat_shape)
        xc = (x - mu) * inv_std
        return xc * reshape(gamma, stat_shape) + reshape(beta, stat_shape)

    for name, v in (("mean", mean), ("var", var)):
        if not isinstance(v, Variable) and core.current_tracer() is not None:
            raise TraceError(
                f"batch_norm: the running {name} is a {type(v).__name__} in a traced run "
                f"({user_line()}); its in-place update would not be replayed\n  fix: keep it "
                f"in a Variable, e.g. {name} = Variable(array), as the BatchNorm layer does")
    m = x.size // channels
    if m == 0:  # an empty batch: an empty output, the running statistics unchanged
        return x * reshape(gamma, stat_shape) + reshape(beta, stat_shape)
    if m == 1:  # computed as the book and Chainer do; an error under simplefilter("error")
        warnings.warn(f"batch_norm: x of shape {x.shape} has one value per channel in "
                      f"training, and a batch of one has no spread: its variance is 0, so "
                      f"the output is beta and the running variance shrinks toward 0; "
                      f"train on batches of two or more, or use dezero.test_mode()",
                      RuntimeWarning, stacklevel=user_stacklevel())
    # Batch statistics are outputs of Functions, so backward reaches them.
    mu = sum(x, axis=axes, keepdims=True) * (1 / m)
    xc = x - mu
    sigma2 = sum(xc * xc, axis=axes, keepdims=True) * (1 / m)
    inv_std = (sigma2 + eps) ** -0.5
    y = xc * inv_std * reshape(gamma, stat_shape) + reshape(beta, stat_shape)

    unbias = m / (m - 1) if m > 1 else 1.0  # one value: its variance, 0, folds in as it is
    with no_grad():
        new_mean = as_variable(mean) * decay + reshape(mu, mean.shape) * (1 - decay)
        new_var = as_variable(var) * decay + reshape(sigma2, var.shape) * ((1 - decay) * unbias)
    for stat, new in ((mean, new_mean), (var, new_var)):
        if isinstance(stat, Variable):
            stat.data = new.data
        else:
            stat[...] = new.data
    return y


# The book spells it this way; the old name keeps its code running.
batch_nrom = batch_norm


def layer_norm(x, gamma, beta, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta, mean and (biased) var over the last
    axis of x, gamma and beta of its length, as PyTorch's layer_norm over one axis.

    >>> layer_norm(np.array([[1.0, 3.0]]), np.ones(2), np.zeros(2)).data.round(4)
    array([[-1.,  1.]])
    """
    x = as_variable(x)
    if x.ndim == 0:
        raise ValueError("layer_norm: x is 0-d; it needs a last axis to normalise over")
    d = x.shape[-1]
    for name, v in (("gamma", gamma), ("beta", beta)):
        if np.shape(v) != (d,):
            raise ValueError(f"layer_norm: {name} must have shape ({d},), the length of the "
                             f"last axis of x (shape {x.shape}), got {np.shape(v)}; "
                             f"make it of the features' size, e.g. np.ones({d})")
    inv_d = 1 / d if d else float("nan")
    xc = x - sum(x, axis=-1, keepdims=True) * inv_d
    var = sum(xc * xc, axis=-1, keepdims=True) * inv_d
    return xc * (var + eps) ** -0.5 * gamma + beta


class EmbedID(Function):
    """Rows of W picked by the integer ids x: y = W[x]."""
    op_name = "embed_id"

    shapes = staticmethod(lambda shapes, attrs: [tuple(shapes[0]) + tuple(shapes[1][1:])])

    def forward(self, x, W):
        if x.dtype.kind not in "iu":
            # numpy would read bool ids as a mask: [True, False, True] picks 2 rows.
            raise TypeError(f"embed_id: ids must be integers, got dtype {x.dtype}; "
                            f"convert them, e.g. x.astype(np.int64)")
        _check_class_ids(self.op_name, x, len(W), of="rows of W (classes)")
        return W[x]

    def backward(self, gy):
        x, W = self.inputs
        return None, EmbedIDGrad(W.shape)(x, gy)


class EmbedIDGrad(Function):
    """Scatter-add gy into zeros of W's shape at rows x: the adjoint of embed_id."""
    op_name = "embed_id_grad"

    shapes = staticmethod(_attr_shape("w_shape"))

    def __init__(self, w_shape):
        self.w_shape = w_shape

    def forward(self, x, gy):
        xp = cuda.get_array_module(gy)
        gW = xp.zeros(self.w_shape, dtype=gy.dtype)
        if xp is np:
            np.add.at(gW, x, gy)
        else:
            import cupyx
            cupyx.scatter_add(gW, x, gy)
        return gW

    def backward(self, ggW):
        x, gy = self.inputs
        return None, embed_id(x, ggW)


def embed_id(x, W):
    """W[x]: the rows of the embedding matrix W (V, D) for integer ids x.

    >>> embed_id(np.array([1, 1]), np.eye(2)).data
    array([[0., 1.],
           [0., 1.]])
    """
    return EmbedID()(x, W)


# =============================================================================
# Teaching versions composed of other functions: sigmoid_simple, softmax_simple,
#   softmax_cross_entropy_simple, mean_squared_error_simple, linear_simple
# =============================================================================


def sigmoid_simple(x):
    """1 / (1 + exp(-x)) as three functions (overflows exp for x < -88 in float32)."""
    x = as_variable(x)
    return 1 / (1 + exp(-x))


def softmax_simple(x, axis=1):
    """exp(x) / sum(exp(x), axis) without the max shift (overflows for large x)."""
    x = as_variable(x)
    y = exp(x)
    return y / sum(y, axis=axis, keepdims=True)


def softmax_cross_entropy_simple(x, t):
    """softmax_cross_entropy composed: -mean(log(clip(softmax(x)))[i, t[i]])."""
    x, = _floating(_given("softmax_cross_entropy_simple", "x", x))
    t = _given("softmax_cross_entropy_simple", "t", t)
    _check_labels("softmax_cross_entropy_simple", x, t)
    n = len(x)
    p = clip(softmax(x), 1e-15, 1.0)  # keeps log away from log(0)
    log_p = log(p)
    # The labels pick log_p[i, t[i]] through a one-hot mask, an op of t, so that a
    # trace reads them from its graph instead of freezing t's values into an index.
    mask = OneHot(x.shape[1], x.dtype.name, "softmax_cross_entropy_simple")(reshape(t, (n,)))
    picked = sum(log_p * mask, axis=1)
    return -sum(picked) * _per_example(x)


def mean_squared_error_simple(x0, x1):
    """mean_squared_error composed: sum((x0 - x1) ** 2) / len(x0)."""
    x0 = _given("mean_squared_error_simple", "x0", x0)
    x0, x1 = _floating(x0, _given("mean_squared_error_simple", "x1", as_operand(x1, x0)))
    x1 = _paired("mean_squared_error_simple", x0, x1, "x1")
    diff = x0 - x1
    return sum(diff ** 2) * _per_example(diff)


def linear_simple(x, W, b=None):
    """x @ W + b composed of matmul and add."""
    t = matmul(x, W)
    if b is None:
        return t
    return t + b


# =============================================================================
# Convolution and pooling, defined in functions_conv.py: conv2d, deconv2d,
#   conv2d_simple, pooling, pooling_simple, average_pooling, im2col, col2im
# =============================================================================
# Imported last: functions_conv builds on the functions above.
from dezero.functions_conv import (  # noqa: E402, F401
    average_pooling,
    col2im,
    conv2d,
    conv2d_simple,
    deconv2d,
    im2col,
    pooling,
    pooling_simple,
)
