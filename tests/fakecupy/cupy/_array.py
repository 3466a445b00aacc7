"""The double's ndarray: a numpy array inside a type of its own, refusing to mix.

Every cupy function and ndarray method here runs numpy on the arrays inside, after
`unwrap` has refused what cupy refuses (a numpy array where cupy wants its own, with
cupy's "Unsupported type" TypeError), and `wrap` turns numpy results into ndarrays
(numpy's scalars become 0-d arrays, as cupy returns them). `__array__` raises as on
cupy, so np.asarray(x) of a cupy array fails; `.get()` and cupy.asnumpy copy out.
"""
import numbers
import weakref

import numpy

from cupy import _names


def _refuse(value):
    raise TypeError(f"Unsupported type {type(value)}")


def unwrap(value, allow_numpy=False):
    """The numpy value under `value`: ndarrays (also inside lists and tuples) unwrapped;
    a numpy array is refused unless `allow_numpy`."""
    if isinstance(value, ndarray):
        return value._a
    if isinstance(value, numpy.ndarray):
        return value if allow_numpy else _refuse(value)
    if isinstance(value, (list, tuple)):
        return type(value)(unwrap(v, allow_numpy) for v in value)
    return value


def wrap(value):
    """numpy results as the double's: arrays and numpy scalars become ndarrays."""
    if isinstance(value, numpy.ndarray):
        return _from_numpy(value)
    if isinstance(value, numpy.generic):
        return _from_numpy(numpy.asarray(value))
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return type(value)(wrap(v) for v in value)
    return value


# id of a numpy array that owns its memory -> the ndarray around it. A view holds
# that ndarray as its base, as cupy's views hold theirs: the base stays alive and
# counted (sys.getrefcount) while someone holds a view of it.
_OWNERS = weakref.WeakValueDictionary()


def _from_numpy(a):
    if a.dtype.kind in "OSUVMm":  # objects, strings, records, dates: no device type
        raise ValueError(f"Unsupported dtype {a.dtype}")
    array = ndarray.__new__(ndarray)
    array._a = a
    _own(array)
    return array


def _own(array):
    root = array._a
    while isinstance(root.base, numpy.ndarray):
        root = root.base
    array._base = None if root is array._a else _OWNERS.get(id(root))
    if root is array._a:
        _OWNERS[id(root)] = array


def call(fn, *args, **kwargs):
    """fn (a numpy callable) on the arrays inside args; an `out` array comes back as
    itself, not as a new ndarray around the same memory."""
    originals = {id(v._a): v for v in (*args, *kwargs.values(), *_outs(kwargs))
                 if isinstance(v, ndarray)}
    result = fn(*unwrap(args), **{k: unwrap(v) for k, v in kwargs.items()})
    if isinstance(result, numpy.ndarray) and id(result) in originals:
        return originals[id(result)]
    return wrap(result)


def _outs(kwargs):
    out = kwargs.get("out")
    return out if isinstance(out, tuple) else ()


class ufunc:
    """A numpy ufunc under cupy's name: call, and the reduce/accumulate/outer/at methods."""

    def __init__(self, np_ufunc):
        self._u = np_ufunc
        self.name = self.__name__ = np_ufunc.__name__
        self.nin, self.nout, self.nargs = np_ufunc.nin, np_ufunc.nout, np_ufunc.nargs

    def __call__(self, *args, **kwargs):
        return call(self._u, *args, **kwargs)

    def __getattr__(self, name):
        if name not in ("reduce", "accumulate", "outer", "at", "reduceat"):
            raise AttributeError(name)
        return lambda *args, **kwargs: call(getattr(self._u, name), *args, **kwargs)

    def __repr__(self):
        return f"<ufunc '{self.name}'>"


def function(np_fn):
    """A numpy function under cupy's name, refusing numpy arrays."""
    if isinstance(np_fn, numpy.ufunc):
        return ufunc(np_fn)

    def run(*args, **kwargs):
        return call(np_fn, *args, **kwargs)
    run.__name__ = run.__qualname__ = getattr(np_fn, "__name__", "function")
    run.__doc__ = f"numpy.{run.__name__} on the double's arrays."
    return run


class MemoryPointer:
    """What cupy's ndarray.data is: a pointer to device memory, not the array's values."""

    def __init__(self, array):
        self.ptr = array._a.__array_interface__["data"][0]
        self.device_id = 0

    @property
    def device(self):
        from cupy import cuda
        return cuda.Device(self.device_id)

    def __int__(self):
        return self.ptr

    def __repr__(self):
        return f"<MemoryPointer 0x{self.ptr:x} device={self.device_id}>"


def _binary(np_ufunc, reflected=False):
    def op(self, other):
        # A Variable (higher __array_priority__, not an ndarray) takes over, as on cupy.
        if not isinstance(other, (ndarray, numpy.ndarray, numbers.Number, numpy.generic)) \
                and getattr(other, "__array_priority__", 0) > self.__array_priority__:
            return NotImplemented
        return call(np_ufunc, other, self) if reflected else call(np_ufunc, self, other)
    return op


def _inplace(np_ufunc):
    def op(self, other):
        call(np_ufunc, self, other, out=(self,))
        return self
    return op


def _unary(np_ufunc):
    return lambda self: call(np_ufunc, self)


class ndarray:
    """cupy.ndarray of the double: numpy's values in a type numpy does not accept."""

    __slots__ = ("_a", "_base", "__weakref__")
    __array_priority__ = 100
    __hash__ = None

    def __init__(self, shape, dtype=float, memptr=None, strides=None, order="C"):
        if memptr is not None or strides is not None:
            raise NotImplementedError("the cupy test double makes arrays without memptr "
                                      "or strides")
        self._a = numpy.empty(shape, dtype, order=order)
        _own(self)

    # What cupy refuses: implicit conversion to numpy.
    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use "
                        "`.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, np_ufunc, method, *inputs, **kwargs):
        if not _names.has("cupy", np_ufunc.__name__):
            return NotImplemented
        fn = np_ufunc if method == "__call__" else getattr(np_ufunc, method)
        return call(fn, *inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        owner = "cupy" + func.__module__[len("numpy"):]
        if not func.__module__.startswith("numpy") or not _names.has(owner, func.__name__):
            return NotImplemented
        return call(func, *args, **kwargs)

    # Copies out, and the attributes that differ from numpy's.
    def get(self, stream=None, order="C", out=None, blocking=True):
        if out is not None:
            out[...] = self._a
            return out
        return numpy.array(self._a, order=order)

    def set(self, arr, stream=None):
        if not isinstance(arr, numpy.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, got {type(arr)}")
        self._a[...] = arr

    @property
    def data(self):
        return MemoryPointer(self)

    @property
    def device(self):
        from cupy import cuda
        return cuda.Device(0)

    @property
    def shape(self):
        return self._a.shape

    @shape.setter
    def shape(self, shape):
        self._a.shape = shape

    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: wrap(self._a.T))
    base = property(lambda self: self._base if self._base is not None else
                    None if self._a.base is None else wrap(self._a.base))

    def __getattr__(self, name):
        if not _names.has("cupy.ndarray", name) or not hasattr(numpy.ndarray, name):
            raise _names.missing("cupy.ndarray", name)
        value = getattr(self._a, name)
        return (lambda *a, **k: call(value, *a, **k)) if callable(value) else wrap(value)

    # Python's protocols: indexes may be numpy arrays, as cupy converts them.
    def __getitem__(self, key):
        return wrap(self._a[unwrap(key, allow_numpy=True)])

    def __setitem__(self, key, value):
        self._a[unwrap(key, allow_numpy=True)] = unwrap(value, allow_numpy=True)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (wrap(row) for row in self._a)

    def __bool__(self):
        return bool(self._a)

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __complex__(self):
        return complex(self._a)

    def __copy__(self):
        return _from_numpy(self._a.copy())

    def __deepcopy__(self, memo):
        return _from_numpy(self._a.copy())

    def __reduce__(self):
        return _from_numpy, (self._a,)

    def __repr__(self):
        return repr(self._a)

    def __str__(self):
        return str(self._a)


for _name, _fn in {"add": numpy.add, "sub": numpy.subtract, "mul": numpy.multiply,
                   "truediv": numpy.true_divide, "floordiv": numpy.floor_divide,
                   "mod": numpy.remainder, "pow": numpy.power, "matmul": numpy.matmul,
                   "and": numpy.bitwise_and, "or": numpy.bitwise_or,
                   "xor": numpy.bitwise_xor, "lshift": numpy.left_shift,
                   "rshift": numpy.right_shift, "divmod": numpy.divmod}.items():
    setattr(ndarray, f"__{_name}__", _binary(_fn))
    setattr(ndarray, f"__r{_name}__", _binary(_fn, reflected=True))
    if _name not in ("divmod", "matmul"):  # cupy has no __idivmod__, __imatmul__
        setattr(ndarray, f"__i{_name}__", _inplace(_fn))
for _name, _fn in {"eq": numpy.equal, "ne": numpy.not_equal, "lt": numpy.less,
                   "le": numpy.less_equal, "gt": numpy.greater,
                   "ge": numpy.greater_equal}.items():
    setattr(ndarray, f"__{_name}__", _binary(_fn))
for _name, _fn in {"neg": numpy.negative, "pos": numpy.positive, "abs": numpy.absolute,
                   "invert": numpy.invert}.items():
    setattr(ndarray, f"__{_name}__", _unary(_fn))
del _name, _fn
ndarray.__module__ = "cupy"  # as real cupy shows its type: cupy.ndarray
