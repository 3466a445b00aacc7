"""The small core of the book's steps 23-32: Variable, Function and arithmetic.

Gradients are plain numpy arrays here, so derivatives of derivatives are not
possible yet; dezero/core.py grows this into the full core (gradients become
Variables, step 33 onwards). Import it directly, or set `is_simple_core = True`
in dezero/__init__.py as the book's steps 23-32 do.

    x = Variable(np.array(2.0)); y = x ** 3; y.backward(); x.grad  # 12.0
"""
import contextlib
import heapq
import itertools
import weakref

import numpy as np

# =============================================================================
# Config: using_config, no_grad
# =============================================================================


class Config:
    enable_backprop = True


@contextlib.contextmanager
def using_config(name, value):
    old_value = getattr(Config, name)
    setattr(Config, name, value)
    try:
        yield
    finally:
        setattr(Config, name, old_value)


def no_grad():
    return using_config("enable_backprop", False)


# =============================================================================
# Variable: as_array, as_variable
# =============================================================================


class Variable:
    # Makes `ndarray <op> Variable` use Variable's reflected operators.
    __array_priority__ = 200

    def __init__(self, data, name=None):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(f"Variable data must be a numpy array, got {type(data).__name__}")
        self.data = data
        self.name = name
        self.grad = None
        self.creator = None
        self.generation = 0

    @property
    def shape(self):
        return self.data.shape

    @property
    def ndim(self):
        return self.data.ndim

    @property
    def size(self):
        return self.data.size

    @property
    def dtype(self):
        return self.data.dtype

    def __len__(self):
        return len(self.data)

    def __repr__(self):
        if self.data is None:
            return "variable(None)"
        return "variable(" + str(self.data).replace("\n", "\n" + " " * 9) + ")"

    def set_creator(self, func):
        self.creator = func
        self.generation = func.generation + 1

    def cleargrad(self):
        self.grad = None

    def backward(self, retain_grad=False):
        if self.grad is None:
            self.grad = np.ones_like(self.data)

        # Latest generation first, so that a Function runs only once every
        # gradient flowing into its outputs has been added up.
        heap, seen, tie = [], set(), itertools.count()

        def push(f):
            if f is not None and f not in seen:
                seen.add(f)
                heapq.heappush(heap, (-f.generation, next(tie), f))

        push(self.creator)
        while heap:
            f = heapq.heappop(heap)[2]
            gys = [output().grad for output in f.outputs]
            gxs = f.backward(*gys)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs):
                x.grad = gx if x.grad is None else x.grad + gx
                push(x.creator)
            if not retain_grad:
                for output in f.outputs:
                    output().grad = None


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


def as_variable(obj):
    return obj if isinstance(obj, Variable) else Variable(obj)


def _as_operand(x, like):
    # A Python scalar takes the dtype of the Variable it meets, so float32 stays float32.
    if np.isscalar(x):
        like = like.data if isinstance(like, Variable) else like
        return np.array(x, dtype=np.result_type(like, x))
    return x


# =============================================================================
# Function: the base class of every op
# =============================================================================


class Function:
    def __call__(self, *inputs):
        inputs = [as_variable(as_array(x)) for x in inputs]
        ys = self.forward(*[x.data for x in inputs])
        if not isinstance(ys, tuple):
            ys = (ys,)
        outputs = [Variable(as_array(y)) for y in ys]
        if Config.enable_backprop:
            self.generation = max(x.generation for x in inputs)
            for output in outputs:
                output.set_creator(self)
            self.inputs = inputs
            # Weak references: the outputs own their creator, not the reverse.
            self.outputs = [weakref.ref(output) for output in outputs]
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError()

    def backward(self, *gys):
        raise NotImplementedError()


# =============================================================================
# Arithmetic: add, mul, neg, sub, rsub, div, rdiv, pow
# =============================================================================


class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy


def add(x0, x1):
    return Add()(x0, _as_operand(x1, x0))


class Mul(Function):
    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return gy * x1, gy * x0


def mul(x0, x1):
    return Mul()(x0, _as_operand(x1, x0))


class Neg(Function):
    def forward(self, x):
        return -x

    def backward(self, gy):
        return -gy


def neg(x):
    return Neg()(x)


class Sub(Function):
    def forward(self, x0, x1):
        return x0 - x1

    def backward(self, gy):
        return gy, -gy


def sub(x0, x1):
    return Sub()(x0, _as_operand(x1, x0))


def rsub(x0, x1):
    return Sub()(_as_operand(x1, x0), x0)


class Div(Function):
    def forward(self, x0, x1):
        return x0 / x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return gy / x1, gy * (-x0 / x1 ** 2)


def div(x0, x1):
    return Div()(x0, _as_operand(x1, x0))


def rdiv(x0, x1):
    return Div()(_as_operand(x1, x0), x0)


class Pow(Function):
    def __init__(self, c):
        self.c = c

    def forward(self, x):
        return x ** self.c

    def backward(self, gy):
        x = self.inputs[0].data
        if self.c == 0:
            return 0 * gy  # x ** 0 is constant, also at x = 0 (where 0 * x ** -1 is NaN)
        return self.c * x ** (self.c - 1) * gy


def pow(x, c):
    return Pow(c)(x)


def setup_variable():
    """Install the arithmetic operators on Variable."""
    Variable.__add__ = add
    Variable.__radd__ = add
    Variable.__mul__ = mul
    Variable.__rmul__ = mul
    Variable.__neg__ = neg
    Variable.__sub__ = sub
    Variable.__rsub__ = rsub
    Variable.__truediv__ = div
    Variable.__rtruediv__ = rdiv
    Variable.__pow__ = pow
