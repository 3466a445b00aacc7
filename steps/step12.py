"""Step 12: variable-length arguments, the easy way.

Same idea as step 11 with nicer calls: `__call__(*inputs)` takes the
Variables as separate arguments, `forward(*xs)` receives the arrays
unpacked, and a single output comes back as a Variable rather than a list.
`add(x0, x1)` now reads like ordinary Python.
Run: python steps/step12.py
"""
import numpy as np


# =============================================================================
# Framework: Variable, Function, as_array
# =============================================================================
class Variable:
    def __init__(self, data):
        if data is not None and not isinstance(data, np.ndarray):
            raise TypeError(
                f"Variable holds a numpy.ndarray, got {type(data).__name__}; "
                f"wrap it first: Variable(np.array({data!r}))")
        self.data = data
        self.grad = None
        self.creator = None

    def set_creator(self, func):
        self.creator = func


def as_array(x):
    if np.isscalar(x):
        return np.array(x)
    return x


class Function:
    def __call__(self, *inputs):
        xs = [x.data for x in inputs]
        ys = self.forward(*xs)
        if not isinstance(ys, tuple):
            ys = (ys,)  # forward may return a bare array when it has one output
        outputs = [Variable(as_array(y)) for y in ys]
        for output in outputs:
            output.set_creator(self)
        self.inputs = inputs
        self.outputs = outputs
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(
            f"{type(self).__name__} must define forward(*xs) returning array(s)")


class Add(Function):
    def forward(self, x0, x1):
        return x0 + x1


def add(x0, x1):
    return Add()(x0, x1)


# =============================================================================
# Demo
# =============================================================================
x0 = Variable(np.array(2))
x1 = Variable(np.array(3))
y = add(x0, x1)
print("add(2, 3) =", y.data)
