"""Step 15: complex graphs -- why the order of backward matters (theory).

Until now each Function was processed as soon as it was reached. On a graph
where one variable feeds two branches, that can run a Function before all
the gradient for its output has arrived. The fix is to process Functions
from the output towards the inputs by *generation*: a Function's generation
is its input's, and a Variable's is its creator's plus one; a Function runs
only after every Function of higher generation. Read: the book's chapter on
complex computational graphs (topological order). This script runs the
framework of step 14 on such a graph and shows the wrong gradient it gives.
Run: python steps/step15.py
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

    def cleargrad(self):
        self.grad = None

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)
        funcs = [self.creator]
        while funcs:
            f = funcs.pop()
            gys = [output.grad for output in f.outputs]
            gxs = f.backward(*gys)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs):
                # A new array, not `+=`: x.grad may be the very array gy of
                # another variable (Add passes gy through), and must not change it.
                x.grad = gx if x.grad is None else x.grad + gx
                if x.creator is not None:
                    funcs.append(x.creator)


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
        for output in outputs:
            output.set_creator(self)
        self.inputs = inputs
        self.outputs = outputs
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
# Demo: a = x^2; y = a^2 + a^2, where x's creator is reached twice
# =============================================================================
visits = []


class LoggedSquare(Square):
    """Square that records when its backward runs, to show the visiting order."""

    def __init__(self, label):
        self.label = label

    def backward(self, gy):
        visits.append(self.label)
        return super().backward(gy)


x = Variable(np.array(2.0))
a = LoggedSquare("A: a=x^2")(x)
b = LoggedSquare("B: b=a^2")(a)
c = LoggedSquare("C: c=a^2")(a)
y = add(b, c)
y.backward()

print("visit order:", " -> ".join(visits))
print("A ran twice, the first time with only C's share of a.grad")
print("y =", y.data, " x.grad (step 14) =", x.grad, " exact dy/dx = 8x^3 =", 8 * 2.0 ** 3)

# Generations for the same graph (step 16 stores them on every object):
#   x: 0 -> A: 0 -> a: 1 -> B, C: 1 -> b, c: 2 -> add: 2 -> y: 3
# Taking the Function with the highest generation first gives add, then B and
# C (either order), and A last, exactly once, with a.grad complete.
generations = {"add": 2, "B": 1, "C": 1, "A": 0}
order = sorted(generations, key=generations.get, reverse=True)
print("order by generation:", " -> ".join(order))
