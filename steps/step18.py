"""Step 18: saving memory -- retain_grad and no_grad.

Two savings. `backward(retain_grad=False)` drops the gradients of
intermediate variables once they have been used; only the leaves (the
inputs the user made) keep theirs. `Config.enable_backprop` switched off,
most easily with `with no_grad():`, skips building the graph at all, which
is what inference wants.
Run: python steps/step18.py
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
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(
                f"Variable holds a numpy.ndarray, got {type(data).__name__}; "
                f"wrap it first: Variable(np.array({data!r}))")
        self.data = data
        self.grad = None
        self.creator = None
        self.generation = 0

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
# Demo: which gradients survive, and a forward pass without a graph
# =============================================================================
x0 = Variable(np.array(1.0))
x1 = Variable(np.array(1.0))
t = add(x0, x1)
y = add(x0, t)
y.backward()
print("y.grad =", y.grad, " t.grad =", t.grad)
print("x0.grad =", x0.grad, " x1.grad =", x1.grad)

with using_config("enable_backprop", True):
    y = square(Variable(np.ones((100, 100))))
print("with backprop: y.creator is", type(y.creator).__name__)

with no_grad():
    y = square(Variable(np.ones((100, 100))))
print("in no_grad:    y.creator is", y.creator)
print("enable_backprop restored to", Config.enable_backprop)
