"""Step 19: a Variable that is easier to use.

Nothing changes in how gradients are computed. A Variable gets an optional
`name`, the array attributes `shape`, `ndim`, `size` and `dtype`, `len()`,
and a `repr` that prints like numpy's (`variable([...])`), so working with
Variables feels like working with arrays.
Run: python steps/step19.py
"""
import contextlib
import weakref

import numpy as np


# =============================================================================
# Framework: Config, using_config, no_grad, Variable, Function, as_array
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


class Function:
    def __call__(self, *inputs):
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
# Functions: add, square
# =============================================================================
class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1

    def backward(self, gy):
        return gy, gy


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        return 2 * self.inputs[0].data * gy


def add(x0, x1):
    return Add()(x0, x1)


def square(x):
    return Square()(x)


# =============================================================================
# Demo: the array-like face of Variable
# =============================================================================
x = Variable(np.array([[1, 2, 3], [4, 5, 6]]), name="x")
print("name:", x.name)
print("shape:", x.shape, " ndim:", x.ndim, " size:", x.size, " dtype:", x.dtype)
print("len:", len(x))
print(repr(x))
print(Variable(np.array(1.5)))
print(Variable(None))
