"""Step 11: functions with several inputs (forward only).

`Function.__call__` now takes a list of Variables and returns a list, so a
function such as `Add` can have two inputs. `forward` receives a list of
arrays and returns a tuple. The next step makes calling this less clumsy.
Run: python steps/step11.py
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
    def __call__(self, inputs):
        xs = [x.data for x in inputs]
        ys = self.forward(xs)
        outputs = [Variable(as_array(y)) for y in ys]
        for output in outputs:
            output.set_creator(self)
        self.inputs = inputs
        self.outputs = outputs
        return outputs

    def forward(self, xs):
        raise NotImplementedError(
            f"{type(self).__name__} must define forward(xs) returning a tuple of arrays")


class Add(Function):
    def forward(self, xs):
        x0, x1 = xs
        y = x0 + x1
        return (y,)  # always a tuple, even with one output


# =============================================================================
# Demo: 2 + 3 through a list in, list out
# =============================================================================
xs = [Variable(np.array(2)), Variable(np.array(3))]
f = Add()
ys = f(xs)
y = ys[0]
print("2 + 3 =", y.data)
