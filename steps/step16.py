"""Step 16: complex graphs, implemented with generations.

Every Variable and Function now carries a `generation` (see step 15).
`Variable.backward` keeps the Functions still to run sorted by generation,
takes the highest first, and adds each Function only once (`seen`), so a
Function runs after all the gradient of its outputs has been summed.
Run: python steps/step16.py
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
        self.generation = 0

    def set_creator(self, func):
        self.creator = func
        self.generation = func.generation + 1

    def cleargrad(self):
        self.grad = None

    def backward(self):
        if self.grad is None:
            self.grad = np.ones_like(self.data)

        funcs = []
        seen = set()

        def add_func(f):
            if f not in seen:
                funcs.append(f)
                seen.add(f)
                # Small graphs here; step 23's library keeps a heap instead.
                funcs.sort(key=lambda func: func.generation)

        add_func(self.creator)
        while funcs:
            f = funcs.pop()  # highest generation
            gys = [output.grad for output in f.outputs]
            gxs = f.backward(*gys)
            if not isinstance(gxs, tuple):
                gxs = (gxs,)
            for x, gx in zip(f.inputs, gxs):
                x.grad = gx if x.grad is None else x.grad + gx
                if x.creator is not None:
                    add_func(x.creator)


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
        # A function comes after all of its inputs: take the latest one.
        self.generation = max(x.generation for x in inputs)
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
# Demo: the graph of step 15, now with the right gradient
# =============================================================================
x = Variable(np.array(2.0))
a = square(x)
y = add(square(a), square(a))
y.backward()
print("generations: x", x.generation, " a", a.generation, " y", y.generation)
print("y =", y.data)
print("x.grad =", x.grad)  # 8x^3 = 64
