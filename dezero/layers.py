"""Layers: objects that own Parameters and compute with the functions of F.

A Layer registers the Parameters, state Variables and sub-Layers assigned to it,
in definition order, so `params()` and saved files are deterministic. Sits on
core.py and functions.py; models.py and optimizers.py build on it.

    fc = L.Linear(10); y = fc(x); fc.save_weights("fc.npz")
"""
import contextlib
import os
import threading
import types
import zipfile
import zlib

import numpy as np

import dezero.functions as F
from dezero import core, cuda
from dezero.core import Parameter, Variable
from dezero.files import save_npz
from dezero.functions_conv import _pair

# =============================================================================
# Layer: the base class, params, devices, save_weights / load_weights
# =============================================================================

# While a traced function records, dezero.static.trace installs an observer here
# and learns what the run does to layers: which attributes it assigns a Variable
# (state carried to the next call, like LSTM.h, wherever the layer lives), which
# gradients it clears, whether it initialised anything, and (optimizers.py) when
# it updates or sets a hyperparameter. One per thread, like the tracer: eager code
# in another thread is not observed.
_observing = threading.local()


def observer():
    """The observer of the recording running in this thread, or None."""
    return getattr(_observing, "current", None)


def set_observer(new):
    """Install `new` (or None) for this thread and return the one it replaces."""
    previous, _observing.current = observer(), new
    return previous


class Layer:
    """Holds Parameters and sub-Layers, found again by `params()`.

    Subclasses list the names of Variables that are state but not trained
    (BatchNorm's running statistics) in `persistent`: they are saved, loaded and
    moved between devices with the parameters, but an optimizer never sees them.
    """

    persistent = ()

    def __init__(self):
        # name -> None: an insertion-ordered set, so order is definition order.
        self._params = {}

    def __setattr__(self, name, value):
        registered = self.__dict__.get("_params")
        if registered is None:
            registered = {}
            object.__setattr__(self, "_params", registered)
        if isinstance(value, (Parameter, Layer)) or (
                isinstance(value, Variable) and name in self.persistent):
            registered.setdefault(name, None)
        else:
            # `self.b = None` (nobias) or any plain value unregisters the name.
            registered.pop(name, None)
        if isinstance(value, Variable) and observer() is not None:
            observer().assigned(self, name, value)
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        self.__dict__.get("_params", {}).pop(name, None)
        object.__delattr__(self, name)

    def __call__(self, *inputs):
        return self.forward(*inputs)

    def forward(self, *inputs):
        raise NotImplementedError(f"{type(self).__name__}.forward is not defined")

    def _named(self, prefix=""):
        # ("l0/W", variable) for every registered Variable below this layer.
        for key, _, _, var in self._owned(prefix):
            yield key, var

    def _owned(self, prefix="", path=()):
        # ("l0/W", layer, "W", variable): _named with the layer that holds each one.
        # path: the layers above; one that refers back to them (a child keeping its
        # parent) is not walked again, which would never end.
        path = (*path, self)
        for name in self.__dict__.get("_params", ()):
            obj = self.__dict__[name]
            if isinstance(obj, Layer):
                if not any(obj is layer for layer in path):
                    yield from obj._owned(prefix + name + "/", path)
            else:
                yield prefix + name, self, name, obj

    def _unbuilt(self, name):
        """(shape, dtype) that the Variable `name`, still without data, gets when
        the layer is built; None where the layer cannot tell. A dimension not known
        yet is a name shared by the layer's Variables that have it, that of the
        attribute which will hold it where there is one (Linear's W:
        ("in_size", out_size)); dtype None means any float dtype."""
        return None

    def __repr__(self):
        """The layer tree: each sub-layer with its number of trained values, each
        Variable's shape and dtype, and the total on the first line (print(model))."""
        lines, counts = [], {"values": 0, "unmade": 0}
        self._describe("", "  ", lines, {}, counts, {id(self)})
        return "\n".join([f"{type(self).__name__}  ({_count_text(counts)})"] + lines)

    def _describe(self, prefix, indent, lines, seen, counts, path):
        # path: the ids of the layers above, so a layer that refers back to one of
        # them is named, not walked again; seen: Variable id -> its first key;
        # counts: the values and unmade arrays found so far, a shared one counted once.
        registered = self.__dict__.get("_params", ())
        for name, obj in list(self.__dict__.items()):
            if name not in registered:
                if isinstance(obj, types.FunctionType):  # MLP's activation, Sequential's F.relu
                    lines.append(f"{indent}{name}: {obj.__name__} (function)")
                continue
            if isinstance(obj, Layer):
                if id(obj) in path:
                    lines.append(f"{indent}{name}: {type(obj).__name__}, shown above")
                    continue
                head, own = len(lines), {"values": 0, "unmade": 0}
                lines.append(f"{indent}{name}: {type(obj).__name__}")
                obj._describe(prefix + name + "/", indent + "  ", lines, seen, own,
                              path | {id(obj)})
                lines[head] += f"  ({_count_text(own, brief=True)})"
                counts["values"] += own["values"]
                counts["unmade"] += own["unmade"]
                continue
            lines.append(f"{indent}{name}  {self._var_text(name, obj, seen, counts)}")
            seen.setdefault(id(obj), prefix + name)

    def _var_text(self, name, var, seen, counts):
        if id(var) in seen:
            return f"{_var_shape(var, self, name)}, shared with {seen[id(var)]}"
        text = _var_shape(var, self, name)
        if not isinstance(var, Parameter):
            return text + ", state"
        if var.data is None:
            counts["unmade"] += 1
            return text + ", made at the first call"
        counts["values"] += var.data.size
        return text

    def params(self):
        """The Parameters of this layer and its sub-layers, in definition order
        (a Parameter shared by two layers comes once)."""
        seen = set()
        for param in self._all_params({id(self)}):
            if id(param) not in seen:
                seen.add(id(param))
                yield param

    def _all_params(self, walked):
        # Like _named without building key strings: params() runs at every step.
        # walked: ids of the layers already walked (a layer may refer back to its parent).
        attrs = self.__dict__
        for name in attrs.get("_params", ()):
            obj = attrs[name]
            if isinstance(obj, Parameter):
                yield obj
            elif isinstance(obj, Layer) and id(obj) not in walked:
                walked.add(id(obj))
                yield from obj._all_params(walked)

    def cleargrads(self):
        params = list(self.params())
        if observer() is not None:
            observer().cleared(params)
        for param in params:
            param.grad = None

    def to_cpu(self):
        for _, var in self._named():
            var.to_cpu()

    def to_gpu(self):
        cuda.require_gpu(f"{type(self).__name__}.to_gpu()")
        for _, var in self._named():
            var.to_gpu()

    def _flatten_params(self, params_dict, parent_key=""):
        """Fill params_dict with "sub/name" -> Variable, parameters and state alike."""
        prefix = parent_key + "/" if parent_key else ""
        for key, var in self._named(prefix):
            params_dict[key] = var

    def save_weights(self, path):
        """Write every parameter and state array to the npz file `path`.

        As with np.savez, ".npz" is appended to a path without it. The file is
        written beside the target and then renamed over it, so a failure never
        leaves a partial file or loses an old one. Returns the path written.
        """
        arrays = self._host_arrays("save_weights")
        return save_npz(path, arrays, f"{type(self).__name__}.save_weights")

    def load_weights(self, path):
        """Load arrays saved by `save_weights` into this layer's Variables.

        The file must hold exactly this layer's keys, with the same shapes and
        real-number dtypes (converted to the model's dtype); layers not built yet
        take the file's sizes where theirs are still open. Everything is checked
        and converted before anything is assigned: on an error the model is left
        as it was, and the error lists what differs.
        """
        path = os.fspath(path)
        if not os.path.exists(path) and os.path.exists(path + ".npz"):
            path += ".npz"  # the name save_weights gave it
        self._load_arrays(_read_npz(path), f"load_weights({path!r})", "the file")

    def state_dict(self):
        """A copy of every parameter and state array, on the CPU, keyed as
        save_weights keys them ({"l0/W": array, "l0/b": array, ...});
        load_state_dict(d) takes it back."""
        return {key: array.copy() for key, array in self._host_arrays("state_dict").items()}

    def load_state_dict(self, arrays):
        """Assign copies of the arrays of a state_dict to this layer's Variables,
        checked as load_weights checks a file: on an error the layer is left as it
        was. (A copy: an in-place update, W.data -= ..., leaves the dict as it is.)"""
        arrays = {key: np.array(value) if cuda.get_array_module(value) is np else
                  cuda.as_numpy(value) for key, value in arrays.items()}
        self._load_arrays(arrays, "load_state_dict", "the state dict")

    def _host_arrays(self, caller):
        params_dict = {}
        self._flatten_params(params_dict)
        empty = [key for key, var in params_dict.items() if var.data is None]
        if empty:
            raise ValueError(
                f"{type(self).__name__}.{caller}: {', '.join(empty)} have no data yet "
                f"(their shapes are set by the first forward); call the model on an "
                f"input once before saving")
        return {key: cuda.as_numpy(var.data) for key, var in params_dict.items()}

    def _load_arrays(self, arrays, call, source):
        owned = list(self._owned())
        keys = [key for key, *_ in owned]
        problems = []
        missing = [key for key in keys if key not in arrays]
        extra = [key for key in arrays if key not in keys]
        if missing:
            problems.append(f"missing from {source}: {', '.join(missing)}")
        if extra:
            problems.append(f"not in the model: {', '.join(extra)}")
        loaded, sizes = {}, {}  # key -> array to assign; (layer id, dim name) -> size
        for key, layer, name, var in owned:
            if key in arrays:
                array, problem = _conform(arrays[key], key, layer, name, var, sizes)
                if problem:
                    problems.append(problem)
                loaded[key] = array
        if problems:
            raise ValueError(f"{type(self).__name__}.{call}: {source} does "
                             f"not match the model ({' | '.join(problems)}); was it saved "
                             f"from a model built the same way?")
        # An array made by loading joins the device of the built ones: a model moved
        # to the GPU before its first call has its biases there, its weights not yet.
        built = [var.data is not None for *_, var in owned]
        on_gpu = any(cuda.get_array_module(var.data) is not np
                     for (*_, var), made in zip(owned, built) if made)
        for (key, *_, var), made in zip(owned, built):
            var.data = loaded[key] if made or not on_gpu else cuda.as_cupy(loaded[key])
        for (_, dim), (layer, size) in sizes.items():
            if hasattr(layer, dim) and getattr(layer, dim) is None:
                setattr(layer, dim, size)  # Linear.in_size, Conv2d.in_channels


def _count_text(counts, brief=False):
    """'1,024 parameters', and for arrays not made yet 'so far' (with how many)."""
    text = f"{counts['values']:,} parameter{'' if counts['values'] == 1 else 's'}"
    if counts["unmade"]:
        unmade = counts["unmade"]
        text += " so far" if brief else \
            f" so far; {unmade} array{'' if unmade == 1 else 's'} not made yet"
    return text


def _var_shape(var, layer, name):
    """'(2, 10) float32' for a Variable; for one without data, the shape and
    dtype its layer will give it, with the sizes still open named."""
    if var.data is not None:
        return f"{_shape_text(var.shape)} {var.dtype}"
    shape, dtype = layer._unbuilt(name) or (None, None)
    shape = "(shape not known yet)" if shape is None else _shape_text(shape)
    return f"{shape} {'float' if dtype is None else np.dtype(dtype)}"


_REAL_KINDS = "biuf"  # bool, signed and unsigned integers, floats


def _conform(array, key, layer, name, var, sizes):
    """(array converted for var, None) or (None, what is wrong with it).

    A built Variable takes the array in its own shape, dtype and device; an unbuilt
    one is checked against the layer's _unbuilt(name), whose open dimensions are
    bound in `sizes` so that all of one layer's Variables agree on them.
    """
    if array.dtype.kind not in _REAL_KINDS:
        return None, (f"{key} holds {array.dtype} values, and weights must be real "
                      f"numbers (bool, int or float)")
    if var.data is not None:
        if array.shape != var.shape:
            return None, f"shapes differ: {key}: file {array.shape}, model {var.shape}"
        # Keep the model's dtype and device (float32 stays float32).
        array = array.astype(var.dtype, copy=False)
        if cuda.get_array_module(var.data) is not np:
            array = cuda.as_cupy(array)
        return array, None
    shape, dtype = layer._unbuilt(name) or (None, None)
    if shape is not None:
        if len(shape) != array.ndim:
            return None, (f"shapes differ: {key}: file {array.shape}, model "
                          f"{_shape_text(shape)}")
        for want, got in zip(shape, array.shape):
            if isinstance(want, str):
                size = sizes.setdefault((id(layer), want), (layer, got))[1]
                if size != got:
                    return None, (f"shapes differ: {key}: file {array.shape}, model "
                                  f"{_shape_text(shape)} with {want} = {size} from "
                                  f"another array of the layer")
            elif want != got:
                return None, (f"shapes differ: {key}: file {array.shape}, model "
                              f"{_shape_text(shape)}")
    if dtype is None:
        dtype = array.dtype if array.dtype.kind == "f" else np.float32
    return array.astype(dtype, copy=False), None


def _shape_text(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _read_npz(path, caller="load_weights", writer="save_weights"):
    """All arrays of an npz file, read at once; a bad file is one clear error."""
    try:
        npz = _load_npz(path)
        if not isinstance(npz, np.lib.npyio.NpzFile):
            raise ValueError("it holds a single array, not an npz archive of named arrays")
        with npz:
            return {key: _read_key(npz, key) for key in npz.files}
    except FileNotFoundError:
        raise FileNotFoundError(f"{caller}: no such file: {path!r}") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error,
            NotImplementedError) as e:  # zipfile: a damaged method, version or flag
        raise ValueError(f"{caller}: cannot read {path!r}: {e} (not an npz file written "
                         f"by {writer}, or one corrupt or truncated)") from e


def _load_npz(path):
    try:
        return np.load(path, allow_pickle=False)
    except ValueError as e:
        if "pickle" not in str(e):
            raise
        # numpy takes a file that is neither a zip nor an array file for a pickle,
        # and says how to load it unsafely.
        raise ValueError("it is not an npz archive (a pickle, or a file of another kind); "
                         "dezero never reads pickles") from None


def _read_key(npz, key):
    try:
        return npz[key]
    except ValueError as e:
        if "allow_pickle" in str(e):  # an object array: pickled Python objects
            raise ValueError(f"key {key} holds Python objects (dtype object), and weights "
                             f"must be arrays of real numbers") from None
        raise


@contextlib.contextmanager
def _untraced():
    """Initialisation (of parameters or optimizer state) happens once, at the
    first call; a trace of that call must not record it as a step to replay."""
    tracer = core.set_tracer(None)
    try:
        yield
    finally:
        core.set_tracer(tracer)
        if observer() is not None:
            observer().initialised()


def _randn(xp, shape, scale, dtype):
    # Cast before scaling by a scalar of the same dtype, so float32 stays float32
    # (a float64 numpy scalar would upcast the whole array under numpy 2).
    W = xp.random.randn(*shape).astype(dtype)
    return W * xp.asarray(scale, dtype=dtype)


# =============================================================================
# Linear / Conv2d / Deconv2d
# =============================================================================


def _check_input(layer, x, ndim):
    """x is a Variable or an array with at least ndim axes, or a TypeError/ValueError
    naming the layer (rather than an AttributeError from x.shape)."""
    if not isinstance(x, (Variable, *cuda.array_types, core.TracedArray)):
        raise TypeError(f"{type(layer).__name__}: the input must be a Variable or an array, "
                        f"got {type(x).__name__}; convert it first, e.g. "
                        f"np.asarray(x, dtype=np.float32)")
    if x.ndim < ndim:
        raise ValueError(f"{type(layer).__name__}: the input needs at least {ndim} axes, "
                         f"got shape {x.shape}")


def _check_nobias(layer, nobias, usage):
    # PyTorch's Linear(in, out) read in the book's order Linear(out_size, nobias)
    # would build a layer of in outputs without a bias, in silence.
    if not isinstance(nobias, bool | np.bool_):
        raise TypeError(f"{layer}: nobias must be True or False, got {nobias!r}; the "
                        f"arguments are in the book's order: {usage}")


class Linear(Layer):
    """y = x @ W + b with W of shape (in_size, out_size), drawn from
    N(0, 1/in_size). With in_size=None, W is made at the first call."""

    def __init__(self, out_size, nobias=False, dtype=np.float32, in_size=None):
        _check_nobias("Linear", nobias, f"Linear(out_size, nobias=False, dtype=np.float32, "
                      f"in_size=None), e.g. Linear({nobias!r}, in_size={out_size!r})")
        super().__init__()
        self.in_size = in_size
        self.out_size = out_size
        self.dtype = dtype
        self.W = Parameter(None, name="W")
        if in_size is not None:
            self._init_W()
        if nobias:
            self.b = None
        else:
            self.b = Parameter(np.zeros(out_size, dtype=dtype), name="b")

    def _init_W(self, xp=np):
        I, O = self.in_size, self.out_size
        with _untraced():
            self.W.data = _randn(xp, (I, O), np.sqrt(1 / I), self.dtype)

    def _unbuilt(self, name):
        if name == "W":
            in_size = "in_size" if self.in_size is None else self.in_size
            return (in_size, self.out_size), self.dtype
        return None

    def forward(self, x):
        _check_input(self, x, 1)
        if self.W.data is None:
            self.in_size = x.shape[-1]
            xp = cuda.get_array_module(x)
            self._init_W(xp)
            if self.b is not None and xp is not np:
                self.b.to_gpu()
        return F.linear(x, self.W, self.b)


class _ConvBase(Layer):
    """The shared constructor of Conv2d and Deconv2d."""

    def __init__(self, out_channels, kernel_size, stride=1, pad=0, nobias=False,
                 dtype=np.float32, in_channels=None):
        _check_nobias(type(self).__name__, nobias, f"{type(self).__name__}(out_channels, "
                      f"kernel_size, stride=1, pad=0, nobias=False, dtype=np.float32, "
                      f"in_channels=None)")
        super().__init__()
        self.in_channels = in_channels
        self.out_channels = out_channels
        _pair(type(self).__name__, "kernel_size", kernel_size)  # refused now, not at the call
        self.kernel_size = kernel_size
        self.stride = stride
        self.pad = pad
        self.dtype = dtype
        self.W = Parameter(None, name="W")
        if in_channels is not None:
            self._init_W()
        if nobias:
            self.b = None
        else:
            self.b = Parameter(np.zeros(out_channels, dtype=dtype), name="b")

    def _w_shape(self, C, OC, KH, KW):
        raise NotImplementedError

    def _init_W(self, xp=np):
        C, OC = self.in_channels, self.out_channels
        KH, KW = _pair(type(self).__name__, "kernel_size", self.kernel_size)
        with _untraced():
            self.W.data = _randn(xp, self._w_shape(C, OC, KH, KW), np.sqrt(1 / (C * KH * KW)),
                                 self.dtype)

    def _unbuilt(self, name):
        if name == "W":
            KH, KW = _pair(type(self).__name__, "kernel_size", self.kernel_size)
            C = "in_channels" if self.in_channels is None else self.in_channels
            return self._w_shape(C, self.out_channels, KH, KW), self.dtype
        return None

    def _lazy_init(self, x):
        _check_input(self, x, 4)
        if self.W.data is None:
            self.in_channels = x.shape[1]
            xp = cuda.get_array_module(x)
            self._init_W(xp)
            if self.b is not None and xp is not np:
                self.b.to_gpu()


class Conv2d(_ConvBase):
    """2-D convolution; W of shape (out_channels, in_channels, KH, KW) drawn
    from N(0, 1/(C*KH*KW)). With in_channels=None, W is made at the first call."""

    def _w_shape(self, C, OC, KH, KW):
        return (OC, C, KH, KW)

    def forward(self, x):
        self._lazy_init(x)
        return F.conv2d(x, self.W, self.b, self.stride, self.pad)


class Deconv2d(_ConvBase):
    """2-D transposed convolution; W of shape (in_channels, out_channels, KH, KW)
    drawn from N(0, 1/(C*KH*KW)). With in_channels=None, W is made at the first call."""

    def _w_shape(self, C, OC, KH, KW):
        return (C, OC, KH, KW)

    def forward(self, x):
        self._lazy_init(x)
        return F.deconv2d(x, self.W, self.b, self.stride, self.pad)


# =============================================================================
# RNN / LSTM
# =============================================================================


class RNN(Layer):
    """An Elman RNN: h = tanh(x2h(x) + h2h(h_prev)); reset_state() forgets h."""

    def __init__(self, hidden_size, in_size=None):
        super().__init__()
        self.x2h = Linear(hidden_size, in_size=in_size)
        # h2h maps the hidden state to itself, so its input size is hidden_size
        # (not in_size, which only fits when both happen to be equal).
        self.h2h = Linear(hidden_size, in_size=hidden_size, nobias=True)
        self.h = None

    def reset_state(self):
        self.h = None

    def forward(self, x):
        _check_state(self, x, self.h)
        if self.h is None:
            h_new = F.tanh(self.x2h(x))
        else:
            h_new = F.tanh(self.x2h(x) + self.h2h(self.h))
        self.h = h_new
        return h_new


def _check_state(layer, x, h):
    # Broadcasting would pair a carried state with a batch of another size in
    # silence (one state for 5 inputs, or 5 outputs for one input).
    _check_input(layer, x, 2)
    if h is not None and h.shape[0] != x.shape[0]:
        raise ValueError(f"{type(layer).__name__}: the carried state is for a batch of "
                         f"{h.shape[0]}, the input is a batch of {x.shape[0]} (shape "
                         f"{x.shape}); call reset_state() before a batch of another size")


class LSTM(Layer):
    """A long short-term memory layer: forget, input and output gates and the
    update u; reset_state() forgets h and c."""

    def __init__(self, hidden_size, in_size=None):
        super().__init__()
        H, I = hidden_size, in_size
        self.x2f = Linear(H, in_size=I)
        self.x2i = Linear(H, in_size=I)
        self.x2o = Linear(H, in_size=I)
        self.x2u = Linear(H, in_size=I)
        self.h2f = Linear(H, in_size=H, nobias=True)
        self.h2i = Linear(H, in_size=H, nobias=True)
        self.h2o = Linear(H, in_size=H, nobias=True)
        self.h2u = Linear(H, in_size=H, nobias=True)
        self.reset_state()

    def reset_state(self):
        self.h = None
        self.c = None

    def forward(self, x):
        _check_state(self, x, self.h)
        f, i, o, u = self.x2f(x), self.x2i(x), self.x2o(x), self.x2u(x)
        if self.h is not None:
            f = f + self.h2f(self.h)
            i = i + self.h2i(self.h)
            o = o + self.h2o(self.h)
            u = u + self.h2u(self.h)
        f, i, o, u = F.sigmoid(f), F.sigmoid(i), F.sigmoid(o), F.tanh(u)
        c_new = i * u if self.c is None else f * self.c + i * u
        h_new = o * F.tanh(c_new)
        self.h, self.c = h_new, c_new
        return h_new


# =============================================================================
# EmbedID / BatchNorm
# =============================================================================


class EmbedID(Layer):
    """A lookup table: y = W[x] for integer ids x, W (in_size, out_size) ~ N(0, 1)."""

    def __init__(self, in_size, out_size, dtype=np.float32):
        super().__init__()
        with _untraced():
            W = np.random.randn(in_size, out_size).astype(dtype)
        self.W = Parameter(W, name="W")

    def forward(self, x):
        if isinstance(x, (int, list, tuple)):
            # Ids written as Python values become an index array on W's device.
            x = cuda.get_array_module(self.W.data).asarray(x)
        return F.embed_id(x, self.W)


class BatchNorm(Layer):
    """Batch normalisation over axis 1 with learned gamma (ones) and beta (zeros).

    avg_mean and avg_var are the running statistics: state Variables, saved with
    the weights but not trained. F.batch_norm assigns their new values in
    training and uses them in test mode. All four are made at the first call,
    with x's size along axis 1, dtype and device.
    """

    persistent = ("avg_mean", "avg_var")

    def __init__(self, decay=0.9, eps=2e-5):
        super().__init__()
        self.decay = decay
        self.eps = eps
        self.avg_mean = Variable(None, name="avg_mean")
        self.avg_var = Variable(None, name="avg_var")
        self.gamma = Parameter(None, name="gamma")
        self.beta = Parameter(None, name="beta")

    def _unbuilt(self, name):
        # All four are vectors over axis 1 of x, in x's float dtype.
        return ("channels",), None

    def _init_params(self, x):
        xp = cuda.get_array_module(x)
        D = x.shape[1]
        with _untraced():
            for var, fill in ((self.avg_mean, 0), (self.avg_var, 1),
                              (self.gamma, 1), (self.beta, 0)):
                if var.data is None:
                    var.data = xp.full(D, fill, dtype=x.dtype)

    def forward(self, x):
        _check_input(self, x, 2)
        if self.avg_mean.data is None or self.gamma.data is None:
            self._init_params(x)
        return F.batch_norm(x, self.gamma, self.beta, self.avg_mean, self.avg_var,
                            decay=self.decay, eps=self.eps)


# =============================================================================
# Transformers: LayerList, LayerNorm, MultiHeadAttention, FeedForward,
#   TransformerBlock
# =============================================================================


class LayerList(Layer):
    """Layers held in order and named by their index ("blocks.0.attn"), as
    PyTorch's ModuleList: `for block in self.blocks`, `self.blocks[0]`."""

    def __init__(self, layers=()):
        super().__init__()
        self._layers = []
        for layer in layers:
            self.append(layer)

    def append(self, layer):
        if not isinstance(layer, Layer):
            raise TypeError(f"LayerList holds Layers, got {type(layer).__name__}")
        setattr(self, str(len(self._layers)), layer)
        self._layers.append(layer)

    def __getitem__(self, index):
        return self._layers[index]

    def __len__(self):
        return len(self._layers)

    def __iter__(self):
        return iter(self._layers)


def _check_last_axis(layer, x, size):
    _check_input(layer, x, 1)
    if x.shape[-1] != size:
        raise ValueError(f"{type(layer).__name__}: the input's last axis must have size "
                         f"{size}, got shape {x.shape}")


class LayerNorm(Layer):
    """Normalisation over the last axis, y = gamma * (x - mean) / sqrt(var + eps) +
    beta, with gamma (ones) and beta (zeros) of the given size."""

    def __init__(self, size, eps=1e-5, dtype=np.float32):
        super().__init__()
        self.size = size
        self.eps = eps
        self.gamma = Parameter(np.ones(size, dtype=dtype), name="gamma")
        self.beta = Parameter(np.zeros(size, dtype=dtype), name="beta")

    def forward(self, x):
        _check_last_axis(self, x, self.size)
        return F.layer_norm(x, self.gamma, self.beta, eps=self.eps)


class MultiHeadAttention(Layer):
    """Self-attention of n_head heads over x (B, T, n_embd): one Linear gives the
    queries, keys and values of every head (qkv), each head attends with
    softmax(q k^T / sqrt(d)) v over its d = n_embd // n_head features, and `proj`
    mixes the heads' outputs. causal=True lets position t see positions <= t."""

    def __init__(self, n_embd, n_head, dropout=0.0, causal=True, dtype=np.float32):
        if isinstance(n_head, bool) or not isinstance(n_head, int | np.integer) or n_head < 1:
            raise ValueError(f"MultiHeadAttention: n_head must be a positive int, got "
                             f"{n_head!r}")  # 0 divided by zero, -2 passed as a divisor
        if n_embd % n_head:
            raise ValueError(f"MultiHeadAttention: n_head={n_head} does not divide "
                             f"n_embd={n_embd}; choose n_embd a multiple of n_head")
        super().__init__()
        self.n_embd, self.n_head = n_embd, n_head
        self.dropout, self.causal = dropout, causal
        self.qkv = Linear(3 * n_embd, in_size=n_embd, dtype=dtype)
        self.proj = Linear(n_embd, in_size=n_embd, dtype=dtype)

    def forward(self, x, mask=None):
        _check_last_axis(self, x, self.n_embd)
        if x.ndim != 3:
            raise ValueError(f"MultiHeadAttention: the input must be (B, T, n_embd), "
                             f"got shape {x.shape}")
        B, T, C = x.shape
        H = self.n_head
        q, k, v = (F.transpose(F.reshape(part, (B, T, H, C // H)), (0, 2, 1, 3))
                   for part in F.split(self.qkv(x), 3, axis=-1))
        p = self.dropout if core.Config.train else 0.0
        y = F.scaled_dot_product_attention(q, k, v, mask=mask, is_causal=self.causal,
                                           dropout_p=p)
        y = F.reshape(F.transpose(y, (0, 2, 1, 3)), (B, T, C))
        return _dropout(self.proj(y), self.dropout)


def _dropout(x, ratio):
    # A ratio of 0 adds no mask to the graph.
    return F.dropout(x, ratio) if ratio else x


class FeedForward(Layer):
    """The position-wise MLP of a transformer block: proj(gelu(fc(x))), the hidden
    layer `hidden` wide (4 * n_embd by default). GELU in GPT-2's tanh form by default
    (approximate="none" for the erf form, as F.gelu)."""

    def __init__(self, n_embd, hidden=None, dropout=0.0, approximate="tanh",
                 dtype=np.float32):
        super().__init__()
        hidden = 4 * n_embd if hidden is None else hidden
        self.dropout, self.approximate = dropout, approximate
        self.fc = Linear(hidden, in_size=n_embd, dtype=dtype)
        self.proj = Linear(n_embd, in_size=hidden, dtype=dtype)

    def forward(self, x):
        return _dropout(self.proj(F.gelu(self.fc(x), self.approximate)), self.dropout)


class TransformerBlock(Layer):
    """A pre-norm transformer block, as GPT-2's:
        x = x + attn(ln1(x));  x = x + mlp(ln2(x))"""

    def __init__(self, n_embd, n_head, dropout=0.0, causal=True, dtype=np.float32):
        super().__init__()
        self.ln1 = LayerNorm(n_embd, dtype=dtype)
        self.attn = MultiHeadAttention(n_embd, n_head, dropout, causal, dtype=dtype)
        self.ln2 = LayerNorm(n_embd, dtype=dtype)
        self.mlp = FeedForward(n_embd, dropout=dropout, dtype=dtype)

    def forward(self, x, mask=None):
        x = x + self.attn(self.ln1(x), mask)
        return x + self.mlp(self.ln2(x))
