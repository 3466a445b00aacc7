"""The dynamic core: Config, Variable, Parameter, Function and backward.

Calling a Function on Variables computes at once (define-by-run) and, while
`Config.enable_backprop` is on, links the outputs to the Function that made them.
`Variable.backward()` walks those links in decreasing generation order. Operators
(+, *, @, [] ...) are installed on Variable by `setup_variable()` from functions.py.

    x = Variable(np.array(2.0)); y = x ** 3; y.backward(); x.grad  # variable(12.0)
"""
import contextlib
import heapq
import itertools
import math
import threading
import weakref

import numpy as np

from dezero import cuda
from dezero.op_record import OPS, register  # noqa: F401 - OPS: the registry's old home

# =============================================================================
# Config: enable_backprop, train, using_config, no_grad, test_mode
# =============================================================================


class _Config(threading.local):
    """Per thread, as the tracer is: a no_grad() or test_mode() in one thread
    changes nothing for another (a recording in another thread included). The
    class attributes are each new thread's defaults."""

    enable_backprop = True
    train = True


Config = _Config()


@contextlib.contextmanager
def using_config(name, value):
    old_value = getattr(Config, name)
    setattr(Config, name, value)
    try:
        yield
    finally:
        setattr(Config, name, old_value)


def no_grad():
    return using_config("enable_backprop", False)


def test_mode():
    return using_config("train", False)


# =============================================================================
# Tracer hooks: TracerHooks, set_tracer, current_tracer (one tracer per thread)
# =============================================================================


class TracerHooks:
    """What the core reports to the tracer of its thread while one is installed.

    dezero.static.tracer.Tracer implements these; the defaults watch and change
    nothing, so a small tracer overrides only what it needs.
    """

    def installed(self):
        """set_tracer has made this the thread's tracer (again, after a pause)."""

    def created(self, var, data):
        """`Variable(data)` is being made; returns the array the Variable holds."""
        return data

    def assigned(self, var, value):
        """`var.data = value`; returns the array to store."""
        return value

    def read(self, var):
        """User code reads `var.data`; returns what it sees (the array, or a guard)."""
        return var._data

    def concretized(self, var, how):
        """A value is read into Python: float(var), bool(var), var.item()."""

    def forward(self, function, xs):
        """Run `function.forward` on the arrays xs for the core; returns its result."""
        return function.forward(*xs)

    def record(self, function, inputs, outputs):
        """`function` has just run on `inputs` (Variables) and made `outputs`."""

    def shape_of(self, var):
        """`var.shape`: the array's, or with symbolic sizes where the trace has them."""
        return var._data.shape

    def backward_step(self, function):
        """Variable.backward is about to run `function.backward`."""

    def cleared(self, var):
        """`var.cleargrad()` is about to drop var.grad."""


class TracedArray:
    """Base of what user code sees of a traced array while a trace records (the
    guard of dezero.static.guard): the core hands it to the tracer, never to numpy."""

    __slots__ = ()

    def operand_of(self, ref):
        """What as_operand makes of it beside the array ref: itself, unless the
        eager value was a numpy float64 scalar, weak like a Python float."""
        return self


class TracedSize:
    """Base of a symbolic size while a trace records (dezero.static.symint): shape
    helpers keep it as it is, so that the op records the expression, not a number."""

    __slots__ = ()


class _ThreadTracer(threading.local):
    tracer = None


_thread = _ThreadTracer()
# How many threads have a tracer installed. While none has, the eager path pays
# one test of this global; only then is the thread-local tracer looked up.
_tracing = 0
_tracing_lock = threading.Lock()


def set_tracer(tracer):
    """Install `tracer` (a TracerHooks, or None) for this thread; return the previous."""
    global _tracing
    previous = _thread.tracer
    with _tracing_lock:
        _tracing += (tracer is not None) - (previous is not None)
    _thread.tracer = tracer
    if tracer is not None:
        tracer.installed()
    return previous


def current_tracer():
    """The tracer installed in this thread, or None."""
    return _thread.tracer if _tracing else None


# =============================================================================
# Variable / Parameter: as_array, as_variable
# =============================================================================


class Variable:
    """A node of the dynamic graph holding an array (`data`) and its gradient."""

    __slots__ = ("_data", "name", "grad", "creator", "generation", "__weakref__")
    # Makes `ndarray <op> Variable` defer to Variable's reflected operators.
    __array_priority__ = 200

    def __init__(self, data, name=None):
        if _tracing and _thread.tracer is not None:
            data = _thread.tracer.created(self, data)
        if data is not None and not isinstance(data, cuda.array_types):
            raise TypeError(
                f"Variable data must be a numpy or cupy array (or None), got "
                f"{type(data).__name__}; wrap it first, e.g. Variable(np.array(...))")
        self._data = data
        self.name, self.grad, self.creator, self.generation = name, None, None, 0

    @property
    def data(self):
        if _tracing and _thread.tracer is not None:
            return _thread.tracer.read(self)
        return self._data

    @data.setter
    def data(self, value):
        if isinstance(value, np.generic):
            value = np.asarray(value)  # numpy's 0-d arithmetic returns scalars
        if _tracing and _thread.tracer is not None:
            value = _thread.tracer.assigned(self, value)
        if value is not None and not isinstance(value, cuda.array_types) and \
                not hasattr(value, "abstract_forward"):  # (a placeholder's, symbols.py)
            raise TypeError(
                f"Variable.data must be a numpy or cupy array (or None), got "
                f"{type(value).__name__}")
        self._data = value

    # ---- array-like properties -------------------------------------------------
    @property
    def shape(self):
        if _tracing and _thread.tracer is not None:
            return _thread.tracer.shape_of(self)
        return self._data.shape

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        if _tracing and _thread.tracer is not None:
            return math.prod(self.shape)  # symbolic where the shape is
        return self._data.size

    @property
    def dtype(self):
        return self._data.dtype

    def __len__(self):
        if _tracing and _thread.tracer is not None and getattr(self._data, "ndim", 0):
            return int(self.shape[0])  # Python needs an int: a symbolic size is fixed
        return len(self._data)

    def __repr__(self):
        if self._data is None:
            return "variable(None)"
        body = str(self._data).replace("\n", "\n" + " " * 9)
        return f"variable({body})"

    # ---- reading a value into Python (a traced value cannot be read) -----------
    def _concrete(self, how):
        if _tracing and _thread.tracer is not None:
            _thread.tracer.concretized(self, how)
        return self._data

    def __bool__(self):
        return bool(self._concrete("bool()"))

    def __float__(self):
        return float(self._concrete("float()"))

    def __int__(self):
        return int(self._concrete("int()"))

    def item(self):
        return self._concrete(".item()").item()

    # ---- graph ---------------------------------------------------------------
    def set_creator(self, func):
        self.creator = func
        self.generation = func.generation + 1

    def cleargrad(self):
        if _tracing and _thread.tracer is not None:
            _thread.tracer.cleared(self)
        self.grad = None

    def unchain(self):
        self.creator = None

    def unchain_backward(self):
        """Cut the graph behind this Variable so that its memory can be freed."""
        if self.creator is None:
            return
        funcs, seen = [self.creator], {id(self.creator)}
        while funcs:
            f = funcs.pop()
            for x in getattr(f, "inputs", ()):
                if x.creator is not None:
                    if id(x.creator) not in seen:
                        seen.add(id(x.creator))
                        funcs.append(x.creator)
                    x.unchain()

    def backward(self, retain_grad=False, create_graph=False):
        """Fill `.grad` of every Variable this one depends on.

        Functions run in decreasing generation order (a heap, no recursion), so a
        Function runs only after all the gradients flowing into it have been summed.
        With create_graph=True the backward computation is itself recorded, which
        is how higher-order derivatives are taken.
        """
        if self.grad is None:
            xp = cuda.get_array_module(self._data)
            self.grad = Variable(xp.ones_like(self._data))
        if self.creator is None:
            return

        # Heap entries are (-generation, tie, f): latest generation first, and the
        # `tie` counter keeps the order deterministic among equal generations.
        heap = [(-self.creator.generation, 0, self.creator)]
        seen = {self.creator}
        tie = itertools.count(1)
        tracer = current_tracer()
        old_backprop = Config.enable_backprop
        Config.enable_backprop = create_graph
        try:
            while heap:
                f = heapq.heappop(heap)[2]
                if tracer is not None:
                    tracer.backward_step(f)
                # Read the outputs' gradients (None for an output that got none or
                # no longer exists) and, unless asked to keep them, drop them.
                gys = []
                for output in f.outputs:
                    y = output()
                    if y is None:
                        gys.append(None)
                    else:
                        gys.append(y.grad)
                        if not retain_grad:
                            y.grad = None
                gxs = f.backward(*gys)
                if type(gxs) is not tuple:
                    gxs = (gxs,)
                for x, gx in zip(f.inputs, gxs):
                    if gx is None:
                        continue
                    if gx.dtype != x._data.dtype and x._data.dtype.kind == "f":
                        # A gradient has its Variable's dtype, whatever the Variable
                        # met (a float64 batch must not turn float32 weights float64).
                        gx = F.astype(gx, x._data.dtype)
                    x.grad = gx if x.grad is None else x.grad + gx
                    creator = x.creator
                    if creator is not None and creator not in seen:
                        seen.add(creator)
                        heapq.heappush(heap, (-creator.generation, next(tie), creator))
        finally:
            Config.enable_backprop = old_backprop

    # ---- shape and reduction methods (defined in functions.py) ---------------
    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return F.reshape(self, tuple(shape))

    def transpose(self, *axes):
        if len(axes) == 0:
            axes = None
        elif len(axes) == 1 and (isinstance(axes[0], (tuple, list)) or axes[0] is None):
            axes = axes[0]
        return F.transpose(self, axes)

    @property
    def T(self):
        return F.transpose(self)

    def sum(self, axis=None, keepdims=False):
        return F.sum(self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return F.max(self, axis, keepdims)

    def min(self, axis=None, keepdims=False):
        return F.min(self, axis, keepdims)

    def matmul(self, W):
        return F.matmul(self, W)

    dot = matmul

    # ---- devices -----------------------------------------------------------
    def to_cpu(self):
        self._move(cuda.as_numpy)

    def to_gpu(self):
        cuda.require_gpu(f"{type(self).__name__}.to_gpu()")
        self._move(cuda.as_cupy)

    def _move(self, convert):
        # The gradient too: an update after the move reads it with the data. An
        # array already there stays (no write, which a trace would have to record).
        if self._data is not None and (moved := convert(self._data)) is not self._data:
            self.data = moved
        if self.grad is not None:
            self.grad._move(convert)


def _wrap_output(data):
    """A Variable for an array a Function computed (skips __init__'s type check)."""
    if not isinstance(data, cuda.array_types) and not hasattr(data, "abstract_forward"):
        data = np.asarray(data)  # numpy returns scalars, not 0-d arrays, from 0-d ops
    v = object.__new__(Variable)
    v._data = data
    v.name = None
    v.grad = None
    v.creator = None
    v.generation = 0
    return v


class Parameter(Variable):
    """A Variable that a Layer collects as a trainable parameter."""

    __slots__ = ()


class Constant(Variable):
    """A value handed to a Function as a Python scalar or an array, not a Variable.

    Nobody else holds it, so its gradient could never be read: ops skip computing
    it (in `y * 2`, backward computes only the gradient of y).
    """

    __slots__ = ()


def as_array(x, array_module=np):
    """x as an array: scalars become 0-d arrays, arrays pass through."""
    if isinstance(x, cuda.array_types):
        return x
    if np.isscalar(x):
        return array_module.array(x)
    return x


def _numeric_array(op, i, x):
    """Input i of op, given as a Python number or an array, as a numeric array."""
    if isinstance(x, _INPUT_ARRAYS):
        return x  # arrays of strings or objects are named once numpy fails on them
    if not np.isscalar(x) or isinstance(x, (str, bytes)):
        raise TypeError(_non_numeric_message(op, i, x))
    return np.array(x)


def _non_numeric_message(op, i, x):
    what = f"an array of dtype {x.dtype}" if isinstance(x, cuda.array_types) else repr(x)[:40]
    return (f"{op}: input {i} is {what}, not numbers; ops take Variables, numeric arrays "
            f"and Python numbers. Convert it first, e.g. np.asarray(x, dtype=np.float32)")


def as_variable(obj):
    if isinstance(obj, Variable):
        return obj
    return Variable(obj)


def as_operand(x, like):
    """The array for a second operand of `like` (a Variable or an array).

    A Python number takes the dtype numpy gives it beside an array of like's dtype:
    NEP 50 on numpy 2 (uint8 [3] * -1 raises OverflowError, as numpy does), value-based
    casting on numpy 1.x (uint8 [3] * -1 is int16 [-3]). A 0-d like counts as an array
    on both, so a float32 loss * 0.5 stays float32. Everything else keeps its own dtype.
    """
    if isinstance(x, _OPERAND_TYPES):
        return x
    ref = like._data if isinstance(like, Variable) else like
    # A Python float or int meeting a float array, or a traced one (numpy arithmetic
    # on an argument inside a traced function, or a placeholder's): the dtype eager
    # numpy gives it.
    if (type(ref) is np.ndarray or isinstance(ref, TracedArray) or
            hasattr(ref, "abstract_forward")) and \
            (type(x) is float or type(x) is int) and ref.dtype.kind == "f":
        return _scalar_array(x, ref.dtype if _NEP50 else _numpy_dtype(ref, x))
    if isinstance(x, (bool, int, float, complex)) and isinstance(ref, cuda.array_types):
        x = x.item() if isinstance(x, np.generic) else x  # a numpy float64 is weak too
        try:
            return cuda.get_array_module(ref).array(x, dtype=_numpy_dtype(ref, x))
        except OverflowError as e:  # numpy 2: the array's dtype cannot hold the int
            raise OverflowError(f"{e}: widen the array first, e.g. x.astype(np.int64)") from None
    if np.isscalar(x):  # a numpy scalar goes to a cupy array's device, as cupy takes it
        return (cuda.get_array_module(ref) if isinstance(x, np.generic) else np).array(x)
    if isinstance(x, TracedArray):
        return x.operand_of(ref)  # Function.__call__ wraps it; the tracer unwraps it
    if isinstance(x, TracedSize):
        return x.operand_of(like)  # an op of the graph that computes the number
    return x if x is None else np.asarray(x)  # None is refused by the op, by name


def _numpy_dtype(ref, x):
    """The dtype numpy gives the Python number x beside the array ref. numpy 1.x casts
    a 0-d array by its value: an int that widens the array keeps an int dtype there
    (as float32, 300 fits float16 again, where float16 [3] + 300 is float32)."""
    dtype = np.result_type(ref.dtype, x)
    widens = not _NEP50 and dtype != ref.dtype and ref.ndim and type(x) is int
    return np.asarray(x).dtype if widens else dtype


_NEP50 = int(np.__version__.split(".")[0]) >= 2  # numpy 2 promotes Python numbers weakly
_OPERAND_TYPES = (Variable, *cuda.array_types)
_INPUT_ARRAYS = (*cuda.array_types, TracedArray)  # the tracer unwraps a TracedArray

# dtype -> {Python number -> read-only 0-d array}: the scalars of `y * 2 + 1`
# are made once, not at every call. Read-only, so sharing them is safe.
_SCALAR_ARRAYS = {}


def _scalar_array(x, dtype):
    # Numbers equal in Python are equal in one dtype (2 and 2.0), except the
    # signed zeros 0.0 and -0.0, which are not cached.
    arrays = _SCALAR_ARRAYS.get(dtype)
    if arrays is None:
        arrays = _SCALAR_ARRAYS[dtype] = {}
    array = arrays.get(x)
    if array is None:
        if x == 0:
            return np.array(x, dtype)
        if len(arrays) >= 1024:  # a loop over many distinct numbers: start afresh
            arrays.clear()
        array = arrays[x] = np.array(x, dtype)
        array.flags.writeable = False
    return array


# =============================================================================
# Function: the base class of every op, and the op registry
# =============================================================================

# Names the core sets on a Function instance; everything else in vars() is an attr.
_RESERVED = frozenset(("inputs", "outputs", "generation"))


class Function:
    """One op: `forward` on arrays, `backward` with Functions on Variables.

    Class facts, which the trace compiler reads from the op's record (op_record.py,
    made when the class is defined):
      cpp       C++ expression of an elementwise op ("{x} * {y}"), else None;
                placeholders are forward's parameter names and the op's attrs.
                The fusion pass puts it into a kernel that computes in one float
                type: every number in it and every attr is written as a literal
                of that type (0.5f in a float32 kernel), so it must mean what
                forward means on floats, NaN, inf and -0.0 included. A node is
                fused only where its inputs and its result share one dtype,
                float32 or float64 (boolean inputs aside, which the kernel reads
                as bool: where's condition), and its attrs are finite numbers; a
                node that promotes dtypes, reads integers or has other attrs runs
                forward.
                Not inherited past an overridden forward. Or a function of the
                attrs -> the expression, decided when the kernel is written
                (Pow: sqrt for c = 0.5, products for 2 and 3, else pow)
      cpp_type  the C++ type cpp yields where it is not the inputs' type ("bool"
                for a comparison); the kernel casts it to the result's type
      reduce    "sum", "max", "min" or "pick" (the entry at a label): the op
                reduces its first input over some axes (its `axis` attr, or what
                its result's shape sums away), so a kernel can fold it into its
                loop; not inherited past forward
      random    the op draws random numbers (never folded or deduplicated)
      collective  the op exchanges data with other processes (an allreduce): every
                process must run it, in the same order, so no pass folds, merges,
                removes or fuses it, nor moves another node across it
      commutative  the inputs may be swapped (common-subexpression elimination)
      py        the Python expression the replay code writes instead of calling
                forward, placeholders as in cpp (`_xp` is numpy or cupy); a dict
                by the number of inputs, or a function (input types, each a
                (shape, dtype), output shape, attrs) -> the expression (Pow:
                products for a float square or cube); None: the code calls forward.
                A subclass that overrides forward does not inherit it
      neutral   {input position: constant} that makes the op return its other
                input exactly (x * 1); neutral_attrs: attrs that make it return
                its input (x ** 1). The simplify pass drops such ops; like
                py, they are not inherited past an overridden forward
      epilogue  where forward ends with an elementwise op applied to its last
                input (x @ W + b): a function of the input shapes -> (that op's
                name, the shape of forward's result without the last input). The
                passes split such a node in two, so that fusion joins the last op
                to the elementwise ops after it (passes.split_epilogues)
      parts     an op a kernel can compute from simpler ops (softmax: a max, an
                exp-sum, a quotient): a function (input shapes, attrs) -> (steps,
                result names), each step (name, op, input names, attrs), inputs
                named by forward's parameters, numbers as constants of the result's
                dtype, the steps forward's numpy calls in its order (so the values
                are the same bits). On the CPU the passes split such a node into its
                steps where all of them can join a kernel (passes.split_parts)
      labels    the parameter holding integer class labels, one a row (t): cpp
                (or a "pick" reduce) compares it with `_r`, the column, so the op
                joins only a CPU kernel over the rows of a 2-d value
      device_only  forward reads its inputs only for their device (a number of
                sizes): fusion lets it read the graph's first input instead, so that
                it waits for no kernel
      fresh_result  forward returns a new array that shares memory with nothing
                (x @ W): a kernel reading it last may write its result into it
      types     a function (input types, attrs) -> the result types, each type a
                (shape, dtype), for an op whose forward cannot run on zeros (a
                collective would exchange) or would run long for nothing (a product
                of the whole shared axis); None: what forward makes of zeros of the
                inputs' types (OpRecord.result_types), which load() checks a graph
                file's declared results against. Not inherited past forward
      shapes    a function (input shapes, attrs) -> the result shapes, in plain
                Python, so that it also takes symbolic sizes (a trace's SymInts,
                whose comparisons become relations the replay checks); None for
                elementwise ops (broadcasting) and ops without one, whose
                symbolic sizes a trace fixes. Not inherited past forward
    Subclasses store their constructor arguments under the same names, so that
    `type(f)(**f.attrs)` rebuilds an equivalent op.
    """

    cpp = cpp_type = reduce = labels = None
    random = False
    collective = False
    commutative = False
    py = None
    neutral = neutral_attrs = epilogue = parts = types = shapes = None
    fresh_result = device_only = False
    op_name = "function"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register(cls)  # names the op and records its facts (op_record.py)

    @property
    def attrs(self):
        """The op's fixed attributes, sorted by name."""
        return {k: v for k, v in sorted(vars(self).items()) if k not in _RESERVED}

    def __call__(self, *inputs):
        # The hot path of eager mode. Plain loops rather than comprehensions: before
        # Python 3.12 each comprehension is a function call, and on small arrays
        # this bookkeeping costs more than the numpy op itself.
        inputs = list(inputs)
        xs = []
        generation = 0
        for i in range(len(inputs)):
            x = inputs[i]
            if not isinstance(x, Variable):
                x = inputs[i] = Constant(_numeric_array(self.op_name, i, x))
            xs.append(x._data)
            if x.generation > generation:
                generation = x.generation
        try:
            ys = self.forward(*xs) if not _tracing or _thread.tracer is None else \
                _thread.tracer.forward(self, xs)
        except (ValueError, IndexError) as e:
            if str(e).startswith(f"{self.op_name}:"):
                raise  # the op wrote a full message already
            shapes = ", ".join(str(getattr(x, "shape", "?")) for x in xs)
            raise type(e)(f"{self.op_name}: {e} (input shapes: {shapes})") from e
        except (TypeError, AttributeError) as e:
            # Checked only once numpy has failed: Variables holding strings, objects
            # or None cost nothing on the way in; nor do placeholders (static/symbols.py).
            abstract = next((x for x in xs if hasattr(x, "abstract_forward")), None)
            if abstract is None:
                for i, x in enumerate(xs):  # kinds object, bytes, str, void
                    if not isinstance(x, cuda.array_types) or x.dtype.kind in "OSUV":
                        raise TypeError(_non_numeric_message(self.op_name, i, x)) from e
                mixed = cuda.gpu_enable and cuda.two_devices_error(self.op_name, xs)
                if mixed:
                    raise mixed from e
                raise
            ys = abstract.abstract_forward(self, xs)
        outputs = [_wrap_output(y) for y in ys] if type(ys) is tuple else [_wrap_output(ys)]

        if Config.enable_backprop:
            self.generation = generation
            self.inputs = inputs
            self.outputs = []
            for y in outputs:
                y.creator = self
                y.generation = generation + 1
                self.outputs.append(weakref.ref(y))
        if _tracing and _thread.tracer is not None:
            _thread.tracer.record(self, inputs, outputs)
        return outputs if len(outputs) > 1 else outputs[0]

    def forward(self, *xs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def backward(self, *gys):
        raise NotImplementedError(
            f"{self.op_name} has no backward: it is not differentiable")

    def __repr__(self):
        attrs = ", ".join(f"{k}={v!r}" for k, v in self.attrs.items())
        return f"{type(self).__name__}({attrs})"


# =============================================================================
# Operators: setup_variable installs them on Variable
# =============================================================================


def setup_variable():
    """Install the arithmetic operators, indexing and `@` on Variable."""
    Variable.__add__ = F.add
    Variable.__radd__ = F.add
    Variable.__mul__ = F.mul
    Variable.__rmul__ = F.mul
    Variable.__neg__ = F.neg
    Variable.__sub__ = F.sub
    Variable.__rsub__ = F.rsub
    Variable.__truediv__ = F.div
    Variable.__rtruediv__ = F.rdiv
    Variable.__pow__ = F.pow
    Variable.__getitem__ = F.get_item
    Variable.__matmul__ = F.matmul
    Variable.__rmatmul__ = F.rmatmul


# functions.py builds on the classes above, so it is imported last;
# dezero/__init__.py calls setup_variable() once both are loaded.
from dezero import functions as F  # noqa: E402
