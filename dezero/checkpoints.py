"""Checkpoints: a model, its optimizer and whatever else a run needs to resume,
in one npz file (no pickle), written atomically.

Beside the model's and the optimizer's state_dict, a checkpoint keeps numpy's
global random state (shuffling, and dropout on the CPU, draw from it; cupy cannot
save its generator's, so saving after dropout on the GPU warns), any object given by
name that has state_dict/load_state_dict (a DataLoader, a schedule), and plain
numbers (the epoch). Loading it back continues the run exactly as if it had
never stopped.

    save_checkpoint("run.npz", model, optimizer, loader=loader, epoch=epoch)
    epoch = load_checkpoint("run.npz", model, optimizer, loader=loader)["epoch"]
"""
import os
import warnings

import numpy as np

from dezero import cuda
from dezero.files import save_npz
from dezero.layers import Layer, _read_npz
from dezero.optimizers import Optimizer


def save_checkpoint(path, model, optimizer=None, **others):
    """Write the state of model, optimizer and `others` (objects with state_dict,
    or int/float numbers) to the npz file `path` (".npz" appended as np.savez
    does). The file is written beside the target and renamed onto it, so a
    crash never leaves half a checkpoint. Returns the path written."""
    arrays = _prefixed("model", model.state_dict())
    if optimizer is not None:
        arrays.update(_prefixed("optimizer", optimizer.state_dict()))
    for name, obj in others.items():
        if isinstance(obj, int | float | np.integer | np.floating) and not isinstance(obj, bool):
            arrays["numbers/" + name] = number = np.array(obj)
            if number.dtype == object:
                raise TypeError(f"save_checkpoint: {name}={obj} is an int no int64 or "
                                f"uint64 holds (np.savez would pickle it); save "
                                f"float({name}) instead")
        elif hasattr(obj, "state_dict"):
            arrays.update(_prefixed("objects/" + name, obj.state_dict()))
        else:
            raise TypeError(f"save_checkpoint: {name}={type(obj).__name__} is neither a "
                            f"number nor an object with state_dict()")
    if cuda.gpu_random_used():
        warnings.warn("save_checkpoint: dropout on the GPU (or another random op there) "
                      "drew from cupy's generator, whose state cupy cannot save; a run "
                      "resumed from this checkpoint draws other masks than the "
                      "uninterrupted run would (everything else is saved)", stacklevel=2)
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    arrays.update({"random/keys": keys, "random/pos": np.array(pos),
                   "random/has_gauss": np.array(has_gauss),
                   "random/cached_gaussian": np.array(cached_gaussian)})
    return save_npz(path, arrays, "save_checkpoint", compress=False)


def load_checkpoint(path, model, optimizer=None, **others):
    """Load a checkpoint written by save_checkpoint into model, optimizer and the
    objects given by the names they were saved under; restore numpy's global
    random state. Returns the numbers saved with it ({"epoch": 3}).

    Everything is checked before the random state is touched; when a part does
    not match, the error is raised with the model, the optimizer and the other
    objects left as they were."""
    path = os.fspath(path)
    if not os.path.exists(path) and os.path.exists(path + ".npz"):
        path += ".npz"
    arrays = _read_npz(path, "load_checkpoint", "save_checkpoint")
    parts = {}
    for key, array in arrays.items():
        head, _, rest = key.partition("/")
        if head == "objects":
            name, _, rest = rest.partition("/")
            head = "objects/" + name
        parts.setdefault(head, {})[rest] = array
    wanted = ["random", *["optimizer"] * (optimizer is not None),
              *["objects/" + name for name in others]]
    missing = [name for name in wanted if name not in parts]
    if missing:
        raise ValueError(f"load_checkpoint({path!r}): the file holds no state for "
                         f"{', '.join(missing)}; was it saved with them?")
    random = _random_state(path, parts["random"])
    numbers = _numbers(path, parts.get("numbers", {}))
    put_back = [_put_back(obj) for obj in (model, optimizer, *others.values())
                if obj is not None]
    try:
        model.load_state_dict(parts.get("model", {}))
        if optimizer is not None:
            optimizer.load_state_dict(parts["optimizer"])
        for name, obj in others.items():
            obj.load_state_dict(parts["objects/" + name])
    except BaseException:
        for restore in put_back:
            restore()
        raise
    np.random.set_state(random)
    return numbers


def _put_back(obj):
    """A function that puts obj back as it is now, for when a later part of the
    checkpoint does not fit. A layer's arrays are kept as they are (None where not
    built yet, which its state_dict() cannot copy)."""
    if isinstance(obj, Layer):
        arrays = [(var, var.data) for _, var in obj._named()]

        def restore():
            for var, data in arrays:
                var.data = data
        return restore
    if isinstance(obj, Optimizer) and obj.target is None:
        return lambda: None  # its load_state_dict refuses before changing anything
    state = obj.state_dict()
    return lambda: obj.load_state_dict(state)


_RANDOM_SHAPES = {"keys": (624,), "pos": (), "has_gauss": (), "cached_gaussian": ()}


def _random_state(path, random):
    """numpy's global random state as saved, checked on a generator of its own."""
    bad = [f"random/{key}" for key, shape in _RANDOM_SHAPES.items()
           if key not in random or random[key].shape != shape or
           random[key].dtype.kind not in "biuf"]
    if not bad:
        state = ("MT19937", random["keys"], int(random["pos"]), int(random["has_gauss"]),
                 float(random["cached_gaussian"]))
        try:
            np.random.RandomState(0).set_state(state)
            return state
        except (TypeError, ValueError, IndexError):
            bad = [f"random/{key}" for key in _RANDOM_SHAPES]
    raise ValueError(f"load_checkpoint({path!r}): {', '.join(bad)} is not a random state "
                     f"numpy takes (the file was damaged or written by other code)")


def _numbers(path, numbers):
    bad = [f"numbers/{name} (shape {array.shape}, {array.dtype})"
           for name, array in numbers.items()
           if array.shape != () or array.dtype.kind not in "iuf"]
    if bad:
        raise ValueError(f"load_checkpoint({path!r}): {', '.join(bad)} is not one number "
                         f"as save_checkpoint writes it (the file was damaged or written "
                         f"by other code)")
    return {name: array.item() for name, array in numbers.items()}


def _prefixed(prefix, state):
    return {f"{prefix}/{key}": value for key, value in state.items()}
