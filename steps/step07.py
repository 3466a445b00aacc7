"""Step 7: automatic backpropagation (recursive).

Adds the links that make the graph walkable: a Variable remembers its
`creator` Function and a Function remembers its `input` and `output`.
`Variable.backward()` then follows creator -> input -> creator ... by itself.
This first version recurses; step 8 turns the recursion into a loop.
Run: python steps/step07.py
"""
import numpy as np


# =============================================================================
# Framework: Variable, Function, Square, Exp
# =============================================================================
class Variable:
    def __init__(self, data):
        self.data = data
        self.grad = None
        self.creator = None

    def set_creator(self, func):
        self.creator = func

    def backward(self):
        f = self.creator
        if f is not None:
            x = f.input
            x.grad = f.backward(self.grad)
            x.backward()  # recurse towards the leaves


class Function:
    def __call__(self, input):
        x = input.data
        y = self.forward(x)
        output = Variable(y)
        output.set_creator(self)  # the output remembers who made it
        self.input = input
        self.output = output
        return output

    def forward(self, x):
        raise NotImplementedError(
            f"{type(self).__name__} must define forward(x) returning an array")

    def backward(self, gy):
        raise NotImplementedError(
            f"{type(self).__name__} must define backward(gy) returning the input's gradient")


class Square(Function):
    def forward(self, x):
        return x ** 2

    def backward(self, gy):
        return 2 * self.input.data * gy


class Exp(Function):
    def forward(self, x):
        return np.exp(x)

    def backward(self, gy):
        return np.exp(self.input.data) * gy


# =============================================================================
# Demo: the graph links, then one call to y.backward()
# =============================================================================
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
a = A(x)
b = B(a)
y = C(b)

# Walking the links backwards from y reaches x.
assert y.creator is C and y.creator.input is b
assert b.creator is B and b.creator.input is a
assert a.creator is A and a.creator.input is x
print("graph links: y <- C <- b <- B <- a <- A <- x")

y.grad = np.array(1.0)
y.backward()
print("x.grad =", x.grad)
