"""Step 17: memory management and reference cycles.

A Function refers to its outputs and each output refers back to its creator:
a reference cycle, which CPython's reference counting cannot free; only the
slower cycle collector can. This step makes `Function.outputs` *weak*
references (`weakref.ref`), which breaks the cycle: a graph is freed the
moment its last output Variable goes away.
Run: python steps/step17.py
"""
import gc
import tracemalloc
import weakref

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
        self.generation = max(x.generation for x in inputs)
        for output in outputs:
            output.set_creator(self)
        self.inputs = inputs
        self.outputs = [weakref.ref(output) for output in outputs]  # no cycle
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
# Demo: graphs are freed by reference counting alone (cycle collector off)
# =============================================================================
gc.disable()  # prove that nothing relies on the cycle collector

x = Variable(np.array(2.0))
y = square(x)
probe = weakref.ref(y.creator)
print("function alive while y exists:", probe() is not None)
del y
print("function freed without the garbage collector:", probe() is None)

# Ten graphs of 8 MB arrays, one after another: memory stays at one graph.
tracemalloc.start()
big = Variable(np.ones(1_000_000))
for _ in range(10):
    y = square(square(square(big)))
current, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
print(f"after 10 graphs: {current / 2**20:.0f} MiB held, peak {peak / 2**20:.0f} MiB")

# Backprop still works through the weak references.
x = Variable(np.array(2.0))
a = square(x)
y = add(square(a), square(a))
y.backward()
print("x.grad =", x.grad)
gc.enable()
