"""Step 8: backpropagation with a loop instead of recursion.

Same behaviour as step 7, but `Variable.backward` keeps a list of Functions
still to process. A loop cannot overflow Python's recursion limit on a deep
graph, and the list is what step 16 will order by generation.
Run: python steps/step08.py
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
        funcs = [self.creator]
        while funcs:
            f = funcs.pop()
            x, y = f.input, f.output
            x.grad = f.backward(y.grad)
            if x.creator is not None:
                funcs.append(x.creator)


class Function:
    def __call__(self, input):
        x = input.data
        y = self.forward(x)
        output = Variable(y)
        output.set_creator(self)
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
# Demo: the chain of step 7, and a chain deeper than the recursion limit
# =============================================================================
A, B, C = Square(), Exp(), Square()
x = Variable(np.array(0.5))
y = C(B(A(x)))
y.grad = np.array(1.0)
y.backward()
print("x.grad =", x.grad)


class Identity(Function):
    def forward(self, x):
        return x

    def backward(self, gy):
        return gy


# 5000 functions deep: the recursive version of step 7 would raise RecursionError.
x = Variable(np.array(1.0))
y = x
for _ in range(5000):
    y = Identity()(y)
y.grad = np.array(1.0)
y.backward()
print("gradient through 5000 identity functions:", x.grad)
