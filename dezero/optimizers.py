"""Optimizers and their hooks: SGD, MomentumSGD, AdaGrad, AdaDelta, Adam, AdamW;
WeightDecay, ClipGrad, FreezeParam.

Every update is computed with dezero functions under no_grad and assigned
(`param.data = new.data`); slots, the step counter and the hyperparameters are
Variables, so a traced training step replays the update faithfully.

    optimizer = optimizers.SGD(lr=0.1).setup(model); ...; optimizer.update()
"""
import functools
import math
import warnings
import weakref

import numpy as np

import dezero.functions as F
from dezero import cuda, layers, utils
from dezero.core import Parameter, Variable, no_grad
from dezero.layers import _untraced

# =============================================================================
# Hyperparameter: a float for users, a 0-d Variable for the update math
# =============================================================================


class Hyperparameter:
    """A float attribute (`opt.lr = 0.1`) backed by a 0-d Variable.

    Reading gives the float last set. Setting assigns the Variable's data, so an
    update, traced or not, reads the new value. The update math reads the
    Variable as `opt._<name>`; before it updates parameters of a device and float
    dtype, `follow` makes that the Variable of their kind, so float32 parameters
    stay float32 and float64 ones get the exact float64 value, also side by side
    in one model (a 0-d float64 array would turn float32 arrays float64).
    """

    def __init__(self, below=None, at_most=None):
        # Every rate is a finite number >= 0; some also have a ceiling: beta1 = 1
        # turns weights into NaN (Adam divides by 1 - beta1 ** t).
        self.below, self.at_most = below, at_most

    def __set_name__(self, owner, name):
        self.name = name
        self.var_key = "_" + name
        self.value_key = "_" + name + "_value"
        self.kinds_key = "_" + name + "_kinds"  # the Variables of other kinds

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if layers.observer() is not None:  # a recording: the number read is frozen in
            layers.observer().hyperparameter_read(obj, self)  # its graph, so guarded
        return obj.__dict__[self.value_key]

    def __set__(self, obj, value):
        if layers.observer() is not None:  # inside a traced function that records
            layers.observer().hyperparameter_set(obj, self.name)
        _refuse_parameters(obj, self.name, value)
        value = float(value)
        problem = self.problem(value)
        if problem:
            raise ValueError(f"{type(obj).__name__}: {problem}")
        var = obj.__dict__.get(self.var_key)
        if var is None:
            obj.__dict__[self.var_key] = Variable(np.array(value, dtype=np.float32),
                                                  name=self.name)
            obj.__dict__[self.kinds_key] = []
        else:
            for each in (var, *obj.__dict__[self.kinds_key]):
                xp = cuda.get_array_module(each.data)
                each.data = xp.array(value, dtype=each.data.dtype)
                self._warn_if_lost(obj, value, each.data)
        obj.__dict__[self.value_key] = value

    def problem(self, value):
        """What is wrong with the float `value` for this hyperparameter, or None."""
        if not (math.isfinite(value) and value >= 0) or \
                (self.below is not None and value >= self.below) or \
                (self.at_most is not None and value > self.at_most):
            interval = f"in [0, {self.below})" if self.below is not None else \
                f"in [0, {self.at_most}]" if self.at_most is not None else "a finite number >= 0"
            return f"{self.name} must be {interval}, got {value}"
        return None

    def follow(self, obj, like, mixed=False):
        """Make `opt._<name>` a Variable of the device and float dtype of the array
        `like`. The one there is converted, unless the parameters are `mixed`
        (of several kinds): then each kind gets a Variable of its own, kept."""
        var = obj.__dict__[self.var_key]
        xp = cuda.get_array_module(like)
        dtype = like.dtype if like.dtype.kind == "f" else np.dtype(np.float32)
        if var.data.dtype == dtype and cuda.get_array_module(var.data) is xp:
            return
        kinds = obj.__dict__[self.kinds_key]
        for other in kinds:
            if other.data.dtype == dtype and cuda.get_array_module(other.data) is xp:
                kinds[kinds.index(other)] = var
                obj.__dict__[self.var_key] = other
                return
        with _untraced():  # a one-time conversion, not part of a step to replay
            array = xp.array(obj.__dict__[self.value_key], dtype=dtype)
            self._warn_if_lost(obj, obj.__dict__[self.value_key], array)
            if mixed:
                kinds.append(var)
                obj.__dict__[self.var_key] = Variable(array, name=self.name)
            else:
                var.data = array


    def _warn_if_lost(self, obj, value, array):
        # A rate too small for the parameters' dtype is 0 in their updates; for a
        # denominator's guard (Adam's eps in float16) a zero gradient then gives NaN.
        if value != 0 and not array:
            tiny = float(np.finfo(array.dtype).smallest_subnormal)
            warnings.warn(f"{type(obj).__name__}: {self.name} = {value:g} is 0 in "
                          f"{array.dtype}, the dtype of the parameters it updates (an "
                          f"eps of 0 turns a zero gradient into NaN); use at least "
                          f"{tiny:g}, or float32 parameters", stacklevel=4)


def _follow_kind(obj, like, mixed=False):
    """All of obj's hyperparameters follow the array `like` (see Hyperparameter)."""
    for hyperparameter in _hyperparameters(type(obj)):
        hyperparameter.follow(obj, like, mixed)


def _by_kind(params):
    """params in groups of one device and dtype, in order of first appearance."""
    groups = {}
    for param in params:
        groups.setdefault((type(param.data), param.data.dtype), []).append(param)
    return list(groups.values())


def _refuse_parameters(obj, name, value):
    # PyTorch's habit, Adam(model.params()): dezero's optimizers take the model
    # through setup(), and their first argument is a hyperparameter.
    if isinstance(value, layers.Layer | Parameter | list | tuple | dict) or \
            hasattr(value, "__next__"):
        cls = type(obj).__name__
        raise TypeError(
            f"{cls}: {name} must be a number, got {type(value).__name__}; an optimizer "
            f"is given its model with setup: optimizer = optimizers.{cls}().setup(model)")


def _checked_target(cls, target):
    # PyTorch's habit, setup([param]) or setup(model.params()): update() failed later
    # on a missing params attribute, naming nothing.
    if not callable(getattr(target, "params", None)):
        given = "None" if target is None else f"a {type(target).__name__}" + (
            f" of length {len(target)}" if isinstance(target, list | tuple) else "")
        raise TypeError(
            f"{cls}.setup: the target must be a Layer or a Model (whose params() it "
            f"updates), got {given}; set parameters of your own on a Layer first "
            f"(layer.W = param), then optimizers.{cls}().setup(layer)")
    return target


@functools.cache
def _hyperparameters(cls):
    return tuple(attr for klass in cls.__mro__ for attr in vars(klass).values()
                 if isinstance(attr, Hyperparameter))


def _move_like(var, like):
    """Move var (a Variable, or anything else: left alone) to the device of `like`."""
    if isinstance(var, Variable) and type(var._data) is not type(like):
        var.to_cpu() if cuda.get_array_module(like) is np else var.to_gpu()


def _zeros_like(param):
    """Optimizer state for param: zeros of its shape, dtype and device, made
    outside any trace (it is made once, not at every step)."""
    with _untraced():
        xp = cuda.get_array_module(param.data)
        return Variable(xp.zeros_like(param.data))


def _kind(value):
    """numpy's kind letter of an array's dtype (cupy's too), or of a Python number."""
    dtype = getattr(value, "dtype", None)
    return (np.asarray(value).dtype if dtype is None else dtype).kind


def _is_count(array):
    return np.ndim(array) == 0 and np.asarray(array).dtype.kind in "iu"


def _slot_value(old, param, array):
    """A slot's loaded value: an int (the step a parameter joined) stays an int; an
    array is assigned to the slot's Variable, in the parameter's dtype and device."""
    if _is_count(array):
        return int(array)
    xp = cuda.get_array_module(param.data)
    data = xp.asarray(cuda.as_numpy(array) if xp is np else array, dtype=param.dtype)
    if old is None:
        with _untraced():
            return Variable(data.copy())
    old.data = data.copy()
    return old


def _slots():
    """A table of per-parameter state, keyed by the Parameter itself and held
    weakly: a parameter that is gone takes its state with it, and a new one
    never inherits the state of an old one that had the same id(). (Variable
    keeps object's identity hash and equality, which this relies on.)"""
    return weakref.WeakKeyDictionary()


# =============================================================================
# Optimizer: setup, update, update_one, add_hook
# =============================================================================


class Optimizer:
    """Updates the parameters of `target` (a Layer or a Model) from their grads.

    update() runs the hooks on the parameters that have a gradient, then
    update_one on each parameter that still has one. A hook whose class sets
    `runs_first` (dezero.distributed.AllreduceGrads) runs before the others, on every
    parameter, gradient or not (each process must exchange the same ones).
    """

    # Attributes that each update computes before reading them (step sizes): a
    # traced step does not carry them from one call to the next as state.
    per_update = ()
    # Variables that count updates (Adam's t): saved and loaded by state_dict.
    counters = ()

    def __init__(self):
        self.target = None
        self.hooks = []

    def setup(self, target):
        self.target = _checked_target(type(self).__name__, target)
        return self

    def update(self):
        if self.target is None:
            raise RuntimeError(f"{type(self).__name__}.update: no target; call "
                               f"optimizer.setup(model) first")
        if layers.observer() is not None:
            layers.observer().updating()  # the gradients are read from here on
        params = list(self.target.params())
        first = [hook for hook in self.hooks if getattr(hook, "runs_first", False)]
        with no_grad():
            for hook in first:
                hook(params)
            params = [p for p in params if p.grad is not None]
            if not params:
                return
            if cuda.gpu_enable:
                self._follow(params)
            self._count(params[0])
            for hook in self.hooks:
                if hook not in first:
                    _follow_kind(hook, params[0].data)
                    hook(params)
            # A hook may drop a gradient (FreezeParam, or a user's hook).
            groups = _by_kind([p for p in params if p.grad is not None])
            for group in groups:
                self._prepare(group[0], mixed=len(groups) > 1)
                for param in group:
                    self.update_one(param)

    def _follow(self, params):
        """State follows its parameter: slots made before model.to_gpu() (or to_cpu())
        move to their parameter's device, the step counters to the first one's."""
        with _untraced():  # a one-time move, not part of a step to replay
            for _, table in self._slot_tables():
                for param in params:
                    _move_like(table.get(param), param._data)
            for name in self.counters:
                _move_like(getattr(self, name), params[0]._data)

    def _count(self, like):
        """Once per update: step counters."""

    def _prepare(self, like, mixed=False):
        """Before the parameters of like's device and dtype are updated: the
        hyperparameters follow them (and the values derived from them)."""
        _follow_kind(self, like.data, mixed)

    def update_one(self, param):
        raise NotImplementedError(f"{type(self).__name__}.update_one is not defined")

    def add_hook(self, f):
        if isinstance(f, type):  # update() would call the class on the parameters
            raise TypeError(f"add_hook: {f.__name__} is a class; add a hook made from it, "
                            f"with its arguments: optimizer.add_hook({f.__name__}(...))")
        self.hooks.append(f)

    # ---- state_dict / load_state_dict -------------------------------------------
    def state_dict(self):
        """The optimizer's state as named arrays on the CPU: its type, its
        hyperparameters, its step counters and every parameter's slots, keyed by
        the parameter's name in the target ("ms/l0/W", as save_weights names it).
        load_state_dict takes it back; np.savez writes it without pickle. Hooks
        (WeightDecay, ClipGrad ...) are configuration, made by the code that sets
        the optimizer up, and are not part of it."""
        names = {id(param): key for key, param in reversed(self._named_params("state_dict"))}
        state = {"type": np.array(type(self).__name__)}
        for hyperparameter in _hyperparameters(type(self)):
            state["hyperparameters/" + hyperparameter.name] = np.array(
                getattr(self, hyperparameter.name), dtype=np.float64)
        for name in self.counters:
            state["counters/" + name.lstrip("_")] = cuda.as_numpy(getattr(self, name).data).copy()
        for table_name, table in self._slot_tables():
            for param, value in table.items():
                if id(param) in names:  # a parameter the target no longer has is left out
                    array = value.data if isinstance(value, Variable) else np.array(value)
                    state[f"{table_name}/{names[id(param)]}"] = cuda.as_numpy(array).copy()
        return state

    def load_state_dict(self, state):
        """Take back what state_dict gave: everything is checked first (type, keys,
        shapes), so on an error the optimizer is left as it was. Slots go to their
        parameter's dtype and device; the Variables that hold them are assigned,
        not replaced, so a traced step reads the loaded values."""
        cls = type(self).__name__
        params = dict(self._named_params("load_state_dict"))
        problems, slots = [], {}
        saved_type = str(state.get("type", "?"))
        if saved_type != cls:
            problems.append(f"saved from {saved_type}, loaded into {cls}")
        wanted = [f"hyperparameters/{h.name}" for h in _hyperparameters(type(self))]
        wanted += ["counters/" + name.lstrip("_") for name in self.counters]
        problems += [f"{key} is missing" for key in wanted if key not in state]
        for key in [key for key in wanted if key in state]:
            table_name, _, name = key.partition("/")
            if np.shape(state[key]) != () or _kind(state[key]) not in "biuf":
                problems.append(f"{key} is not one number")
            elif table_name == "hyperparameters" and \
                    (problem := getattr(type(self), name).problem(float(state[key]))):
                problems.append(f"{key}: {problem}")
        tables = dict(self._slot_tables())
        for key, array in state.items():
            table_name, _, param_key = key.partition("/")
            if key == "type" or key in wanted:
                continue
            if table_name not in tables or param_key not in params:
                problems.append(f"{key} is not a slot of a parameter of the target")
            elif params[param_key].data is None:
                problems.append(f"{param_key} is not built yet (load the model's state "
                                f"first, or call it on an input once)")
            elif _kind(array) not in "biuf":
                problems.append(f"{key} holds {np.asarray(array).dtype} values, and slots are "
                                f"real numbers")
            elif np.shape(array) != params[param_key].shape and not _is_count(array):
                problems.append(f"{key} has shape {np.shape(array)}, the parameter "
                                f"{params[param_key].shape}")
            else:
                slots.setdefault(table_name, {})[params[param_key]] = array
        if problems:
            raise ValueError(f"{cls}.load_state_dict: the state does not fit this optimizer "
                             f"and its target ({'; '.join(problems)})")
        for hyperparameter in _hyperparameters(type(self)):
            setattr(self, hyperparameter.name,
                    float(state["hyperparameters/" + hyperparameter.name]))
        for name in self.counters:
            var = getattr(self, name)
            xp = cuda.get_array_module(var.data)
            saved = cuda.as_numpy(state["counters/" + name.lstrip("_")])
            var.data = xp.array(saved, dtype=var.dtype)
        for table_name, table in tables.items():
            loaded = slots.get(table_name, {})
            for param in [p for p in table.keys() if p not in loaded]:
                del table[param]  # it starts afresh, as it did when the state was saved
            for param, array in loaded.items():
                table[param] = _slot_value(table.get(param), param, array)

    def _named_params(self, caller):
        if self.target is None:
            raise RuntimeError(f"{type(self).__name__}.{caller}: no target; call "
                               f"optimizer.setup(model) first")
        return [(key, var) for key, var in self.target._named() if isinstance(var, Parameter)]

    def _slot_tables(self):
        return [(name, value) for name, value in vars(self).items()
                if isinstance(value, weakref.WeakKeyDictionary)]


# =============================================================================
# Hooks: WeightDecay, ClipGrad, FreezeParam
# =============================================================================


class WeightDecay:
    """grad <- grad + rate * param (L2 regularisation added to the gradient)."""

    rate = Hyperparameter()

    def __init__(self, rate):
        self.rate = rate

    def __call__(self, params):
        for param in params:
            _follow_kind(self, param.data, mixed=True)  # rate in each parameter's dtype
            param.grad = param.grad + self._rate * param


class ClipGrad:
    """Scale all gradients by min(1, max_norm / (norm + 1e-6)), where norm is the
    L2 norm of all gradients together (utils.clip_grad_norm, as a hook)."""

    max_norm = Hyperparameter()

    def __init__(self, max_norm):
        self.max_norm = max_norm

    def __call__(self, params):
        utils.clip_grad_norm(params, self._max_norm)


class FreezeParam:
    """Leave the parameters of the given layers (or the given Parameters) unchanged."""

    def __init__(self, *layers):
        self.freeze_params = []
        for layer in layers:
            if isinstance(layer, Parameter):
                self.freeze_params.append(layer)
            else:
                self.freeze_params.extend(layer.params())

    def __call__(self, params):
        # Take them off the list (their gradients stay readable) rather than
        # setting grad to None under update()'s feet.
        frozen = {id(p) for p in self.freeze_params}
        params[:] = [p for p in params if id(p) not in frozen]


# =============================================================================
# SGD / MomentumSGD / AdaGrad / AdaDelta
# =============================================================================


class SGD(Optimizer):
    """param <- param - lr * grad."""

    lr = Hyperparameter()

    def __init__(self, lr=0.01):
        super().__init__()
        self.lr = lr

    def update_one(self, param):
        param.data = (param - self._lr * param.grad).data


class MomentumSGD(Optimizer):
    """v <- momentum * v - lr * grad; param <- param + v."""

    lr = Hyperparameter()
    momentum = Hyperparameter()

    def __init__(self, lr=0.01, momentum=0.9):
        super().__init__()
        self.lr = lr
        self.momentum = momentum
        self.vs = _slots()

    def update_one(self, param):
        v = self.vs.get(param)
        if v is None:
            v = self.vs[param] = _zeros_like(param)
        v.data = (self._momentum * v - self._lr * param.grad).data
        param.data = (param + v).data


class AdaGrad(Optimizer):
    """h <- h + grad^2; param <- param - lr * grad / (sqrt(h) + eps)."""

    lr = Hyperparameter()
    eps = Hyperparameter()

    def __init__(self, lr=0.001, eps=1e-8):
        super().__init__()
        self.lr = lr
        self.eps = eps
        self.hs = _slots()

    def update_one(self, param):
        h = self.hs.get(param)
        if h is None:
            h = self.hs[param] = _zeros_like(param)
        grad = param.grad
        h.data = (h + grad * grad).data
        param.data = (param - self._lr * grad / (F.sqrt(h) + self._eps)).data


class AdaDelta(Optimizer):
    """msg <- rho msg + (1 - rho) grad^2; dx = sqrt((msdx + eps) / (msg + eps)) grad;
    msdx <- rho msdx + (1 - rho) dx^2; param <- param - dx."""

    rho = Hyperparameter(at_most=1)
    eps = Hyperparameter()
    per_update = ("_one_minus_rho",)

    def __init__(self, rho=0.95, eps=1e-6):
        super().__init__()
        self.rho = rho
        self.eps = eps
        self.msg = _slots()
        self.msdx = _slots()

    def _prepare(self, like, mixed=False):
        super()._prepare(like, mixed)
        self._one_minus_rho = 1 - self._rho

    def update_one(self, param):
        if param not in self.msg:
            self.msg[param] = _zeros_like(param)
            self.msdx[param] = _zeros_like(param)
        msg, msdx = self.msg[param], self.msdx[param]
        rho, eps, grad = self._rho, self._eps, param.grad
        msg.data = (rho * msg + self._one_minus_rho * (grad * grad)).data
        dx = F.sqrt((msdx + eps) / (msg + eps)) * grad
        msdx.data = (rho * msdx + self._one_minus_rho * (dx * dx)).data
        param.data = (param - dx).data


# =============================================================================
# Adam / AdamW
# =============================================================================


class Adam(Optimizer):
    """m <- m + (1 - beta1)(grad - m); v <- v + (1 - beta2)(grad^2 - v);
    param <- param - lr * m / (sqrt(v) + eps), with the bias-corrected step size
    lr = alpha * sqrt(1 - beta2^t) / (1 - beta1^t) at step t = 1, 2, ...

    t counts the updates since a parameter joined: one added later (a model's
    new head, or another model set up with this optimizer) starts at t = 1, as
    it would under a fresh Adam.
    """

    alpha = Hyperparameter()
    beta1 = Hyperparameter(below=1)
    beta2 = Hyperparameter(below=1)
    eps = Hyperparameter()
    per_update = ("_lr_t", "_one_minus_beta1", "_one_minus_beta2")
    counters = ("_t",)

    def __init__(self, alpha=0.001, beta1=0.9, beta2=0.999, eps=1e-8):
        super().__init__()
        # The step counter is a Variable so that a replayed step increments it.
        self._t = Variable(np.array(0, dtype=np.float32), name="t")
        self.alpha = alpha
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps
        self.ms = _slots()
        self.vs = _slots()
        self.joined = _slots()  # param -> the number of updates done before its first

    @property
    def t(self):
        """The number of updates done so far."""
        return int(self._t.data)

    @t.setter
    def t(self, value):
        xp = cuda.get_array_module(self._t.data)
        self._t.data = xp.array(value, dtype=np.float32)

    @property
    def lr(self):
        """The step size of the latest update (of the first one, before any)."""
        t = max(self.t, 1)
        return self.alpha * math.sqrt(1 - self.beta2 ** t) / (1 - self.beta1 ** t)

    @lr.setter
    def lr(self, value):
        raise AttributeError(f"{type(self).__name__}.lr is derived from alpha, beta1, "
                             f"beta2 and the step count; set alpha instead")

    def _count(self, like):
        t = self._t
        t.data = (t + 1).data

    def _prepare(self, like, mixed=False):
        super()._prepare(like, mixed)
        self._lr_t = self._bias_corrected_lr(self._t)
        self._one_minus_beta1 = 1 - self._beta1
        self._one_minus_beta2 = 1 - self._beta2

    def _bias_corrected_lr(self, t):
        # 1 - beta ** t written as -expm1(t * log(beta)): the exponent is a Variable,
        # and 1 - exp(...) would lose digits (float32 1 - 0.999 keeps about four).
        fix1 = -F.expm1(t * F.log(self._beta1))
        fix2 = -F.expm1(t * F.log(self._beta2))
        lr = self._alpha * F.sqrt(fix2) / fix1
        # t is float32: for float16 parameters the step size comes back to their
        # dtype (a float32 0-d step size turns float16 arrays float32 under numpy 2).
        return lr if lr.dtype == self._alpha.dtype else F.astype(lr, self._alpha.dtype)

    def _moments(self, param):
        """Update param's moments; return them with param's step size."""
        if param not in self.ms:
            self.ms[param] = _zeros_like(param)
            self.vs[param] = _zeros_like(param)
            # Read once, when the slots are made: a constant of this parameter from
            # then on, so a trace may freeze it (hence the raw array, past the guard).
            self.joined[param] = int(self._t._data) - 1
        m, v, grad = self.ms[param], self.vs[param], param.grad
        m.data = (m + self._one_minus_beta1 * (grad - m)).data
        v.data = (v + self._one_minus_beta2 * (grad * grad - v)).data
        joined = self.joined[param]
        lr = self._lr_t if joined == 0 else self._bias_corrected_lr(self._t - joined)
        return m, v, lr

    def update_one(self, param):
        m, v, lr = self._moments(param)
        param.data = (param - lr * m / (F.sqrt(v) + self._eps)).data


def matrices(name, param):
    """AdamW's default `decay`: the parameters of two or more dimensions decay (the W
    of Linear, Conv2d and EmbedID), those of one do not (biases, BatchNorm's and
    LayerNorm's gamma and beta), as GPT-2 and nanoGPT train."""
    return param.ndim >= 2


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's torch.optim.AdamW): before the
    Adam step, param <- param * (1 - alpha * weight_decay); the decay does not pass
    through m and v, and it follows alpha's schedule.

    `decay(name, param) -> bool` says which parameters decay, where PyTorch takes
    two parameter groups, one with weight_decay=0. name is the parameter's path in
    the model, as save_weights names it ("l0/W", "l0/b"). The default,
    `optimizers.matrices`, decays those of two or more dimensions: weight matrices
    and embeddings, not biases nor normalisations' gamma and beta. Other choices:
    embeddings left out too, or every parameter, as torch.optim.AdamW(model.parameters()):

        AdamW(decay=lambda name, p: p.ndim >= 2 and not name.startswith("embed"))
        AdamW(decay=lambda name, p: True)

    The choice is asked at every update (a traced step records it, and a new decay
    function records again); it is configuration, not state: state_dict leaves it out.
    As in Adam, eps is added to sqrt(v); PyTorch adds it to sqrt(v / (1 - beta2^t)),
    which changes a step by a fraction of about eps / sqrt(v): nothing unless the
    gradients are as small as eps.
    """

    weight_decay = Hyperparameter()
    per_update = Adam.per_update + ("_keep", "_keep_undecayed")

    def __init__(self, alpha=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01,
                 decay=matrices):
        super().__init__(alpha, beta1, beta2, eps)
        if not callable(decay):
            raise TypeError(f"AdamW: decay must be a function of (name, param) that says "
                            f"whether the parameter decays, got {type(decay).__name__}: "
                            f"AdamW(decay=lambda name, p: p.ndim >= 2)")
        self.weight_decay = weight_decay
        self.decay = decay

    def update(self):
        # The ids of the parameters that decay, held only while the update runs.
        self._decaying = set() if self.target is None else self._decided()
        try:
            super().update()
        finally:
            del self._decaying

    def _decided(self):
        """The ids of the target's parameters for which decay(name, param) is true."""
        decided = set()
        for name, param, judged in _named_for_decay(self.target):
            if param.data is not None and self.decay(name, judged):
                decided.add(id(param))
        return decided

    def _prepare(self, like, mixed=False):
        super()._prepare(like, mixed)
        shrink = self._alpha * self._weight_decay
        self._keep = 1 - shrink
        # The factor of the parameters that do not decay: 1, computed (from the same
        # product, so that both factors are one small kernel) rather than a literal 1,
        # which the compiler would drop: then every parameter's update has one body,
        # and a traced step runs them all as one horizontal kernel. param * 1 == param.
        self._keep_undecayed = 1 - shrink * 0

    def update_one(self, param):
        m, v, lr = self._moments(param)
        keep = self._keep if id(param) in self._decaying else self._keep_undecayed
        param.data = (param * keep - lr * m / (F.sqrt(v) + self._eps)).data


def _named_for_decay(target):
    """(name, parameter, the parameter decay judges) of each parameter of target: a
    Layer's by their paths (a parameter under two names by its first); the pieces of
    a dist.ShardedOptimizer as the whole parameters they are cut from."""
    wholes = getattr(target, "wholes", None)
    if wholes is not None:
        return [(name, piece, whole) for piece, (name, whole) in zip(target.pieces, wholes)]
    if not hasattr(target, "_named"):
        return [(p.name or "", p, p) for p in target.params()]  # no paths to name them by
    named, seen = [], set()
    for name, var in target._named():
        if isinstance(var, Parameter) and id(var) not in seen:
            seen.add(id(var))
            named.append((name, var, var))
    return named
