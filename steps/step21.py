"""Step 21: operator overloading, part 2 -- mixing in numbers and arrays.

`x + 3.0`, `3.0 * x` and `np.array([2.0]) + x` now work: Functions convert
ndarray inputs with `as_variable`, `add`/`mul` turn Python scalars into arrays
with `as_array`, Variable gets the reflected operators `__radd__` and
`__rmul__`, and `__array_priority__` makes numpy leave `ndarray + Variable`
to Variable.
Run: python steps/step21.py
"""
import contextlib
import weakref

import numpy as np


# =============================================================================
# Framework: Config, using_config, no_grad, Variable, Function, as_array, as_variable
# =============================================================================
class Config:
    """Switches read by every Function call; one set per process."""
    enable_backprop = True


@contextlib.contextmanager
def using_config(name, value):
    old_value = getattr(Config, name)
    setattr(Config, name, value)
    try:
        yield
    finally:
        setattr(Config, name, old_value)  # restored even if the block raises


def no_grad():
    return using_config("enable_backprop", False)


class Variable:
    # numpy checks this when an ndarray meets a Variable in `arr + v`: the
    # higher priority makes numpy defer to Variable.__radd__ instead of
    # broadcasting the Variable as an object element by element.
    __array_priority__ = 200

    def __init__(self, data, name=None):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(
                f"Variable holds a numpy.ndarray, got {type(data).__name__}; "
                f"wrap it first: Variable(np.array({data!r}))")
        self.data = data
        self.name = name  # a label for printing and, later, for graph drawings
        self.grad = None
        self.creator = None
        self.generation = 0

    # A Variable should feel like the array it holds: forward the usual questions.
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
        # Indent continuation lines so that rows line up under "variable(".
        body = str(self.data).replace("\n", "\n" + " " * len("variable("))
        return f"variable({body})"

    # Operators: `a * b` calls mul(a, b), which records a Mul in the graph.
    def __add__(self, other):
        return add(self, other)

    def __radd__(self, other):  # 3.0 + v: Python asks v after float.__add__ gives up
        return add(self, other)

    def __mul__(self, other):
        return mul(self, other)

    def __rmul__(self, other):
        return mul(self, other)

    def set_creator(self, func):
        self.creator = func
        self.generation = func.generation + 1

    def cleargrad(self):
        self.grad = None

    def backward(self, retain_grad=False):
        if self.grad is None:
            self.grad = np.ones_like(self.data)

        funcs = []
        seen = set()

        def add_func(f):
            if f not in seen:
                funcs.append(f)
                seen.add(f)
                funcs.sort(key=lambda func: func.generation)

        add_func(self.creator)
        while funcs:
            f = funcs.pop()
            gys = [output().grad for output in f.outputs]  # call the weakref to get the Variable
            gxs = f.backward(*gys)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs):
                x.grad = gx if x.grad is None else x.grad + gx
                if x.creator is not None:
                    add_func(x.creator)

            if not retain_grad:
                # Intermediate gradients are rarely wanted; drop them as we go.
                for y in f.outputs:
                    y().grad = None


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


def as_variable(obj):
    """Let Functions accept arrays as well as Variables."""
    if isinstance(obj, Variable):
        return obj
    return Variable(obj)


class Function:
    def __call__(self, *inputs):
        inputs = [as_variable(x) for x in inputs]
        xs = [x.data for x in inputs]
        ys = self.forward(*xs)
        if not isinstance(ys, tuple):
            ys = (ys,)
        outputs = [Variable(as_array(y)) for y in ys]
        if Config.enable_backprop:
            # Only graphs that will be differentiated need the links (and the
            # inputs they keep alive); inference skips them.
            self.generation = max(x.generation for x in inputs)
            for output in outputs:
                output.set_creator(self)
            self.inputs = inputs
            self.outputs = [weakref.ref(output) for output in outputs]
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(
            f"{type(self).__name__} must define forward(*xs) returning array(s)")

    def backward(self, *gys):
        raise NotImplementedError(
            f"{type(self).__name__} must define backward(*gys) returning one gradient per input")


# =============================================================================
# Functions: add, mul, square
# =============================================================================
class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy


class Mul(Function):
    def forward(self, x0, x1):
        return x0 * x1

    def backward(self, gy):
        x0, x1 = self.inputs[0].data, self.inputs[1].data
        return gy * x1, gy * x0  # each input's gradient is scaled by the other input


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        return 2 * self.inputs[0].data * gy


def add(x0, x1):
    x1 = as_array(x1)  # a Python scalar becomes a 0-d array, then a Variable
    return Add()(x0, x1)


def mul(x0, x1):
    x1 = as_array(x1)
    return Mul()(x0, x1)


def square(x):
    return Square()(x)


# =============================================================================
# Demo: Variables mixed with Python floats and ndarrays
# =============================================================================
x = Variable(np.array(2.0))
print("x + 3.0             =", x + 3.0)
print("3.0 * x + 1.0       =", 3.0 * x + 1.0)
print("np.array([2.0]) + x =", np.array([2.0]) + x)
y = 3.0 * x + 1.0
y.backward()
print("d(3x + 1)/dx =", x.grad)
