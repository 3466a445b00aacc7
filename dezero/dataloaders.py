"""Data loaders: iterate over a Dataset in mini-batches of (x, t) arrays.

dataloaders.py sits after datasets.py and before the training loop: it draws
indices, gathers examples and stacks them into one array per batch, on the
CPU (numpy) or, with gpu=True, on the GPU (cupy).

    for x, t in DataLoader(dezero.datasets.Spiral(), batch_size=30): ...
"""
import math

import numpy as np


# =============================================================================
# GPU transfer: cupy is imported only when a loader is moved to the GPU
# =============================================================================
def _require_cupy(caller):
    from dezero import cuda
    cuda.require_gpu(caller)


def _to_device(array, gpu):
    if not gpu:
        return array
    from dezero import cuda
    return cuda.as_cupy(array)


# =============================================================================
# Mini-batches: DataLoader
# =============================================================================
class DataLoader:
    """Yield (x, t) batches of `batch_size` examples; the last batch may be
    smaller, or with drop_last=True is left out (so every batch has one shape, and
    a traced step records one graph, not a second for the short batch).

    shuffle draws a new order from the global numpy RNG (np.random.permutation)
    at the start of every epoch, so np.random.seed makes runs repeatable.
    """

    def __init__(self, dataset, batch_size, shuffle=True, gpu=False, drop_last=False):
        if not isinstance(drop_last, bool | np.bool_):
            raise TypeError(f'{type(self).__name__}: drop_last must be True or False, '
                            f'got {drop_last!r}')
        if not (isinstance(batch_size, int | np.integer) and batch_size > 0):
            raise ValueError(f'{type(self).__name__}: batch_size must be a positive int, '
                             f'got {batch_size!r}')
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.data_size = len(dataset)
        rounding = math.floor if drop_last else math.ceil
        self.max_iter = rounding(self.data_size / batch_size)
        if gpu:
            _require_cupy(f'{type(self).__name__}(gpu=True)')
        self.gpu = gpu

        self.reset()

    def reset(self):
        """Start a new epoch: iteration 0 and, with shuffle, a new order."""
        self.iteration = 0
        if self.shuffle:
            self.index = np.random.permutation(len(self.dataset))
        else:
            self.index = np.arange(len(self.dataset))

    def __iter__(self):
        return self

    def __len__(self):
        return self.max_iter

    def __next__(self):
        if self.iteration >= self.max_iter:
            # Ready for the next `for` loop, which is the next epoch.
            self.reset()
            raise StopIteration

        i, batch_size = self.iteration, self.batch_size
        batch_index = self.index[i * batch_size:(i + 1) * batch_size]
        x, t = self._stack([self.dataset[j] for j in batch_index])
        self.iteration += 1
        return x, t

    def _stack(self, batch):
        x = np.array([example[0] for example in batch])
        t = np.array([example[1] for example in batch])
        return _to_device(x, self.gpu), _to_device(t, self.gpu)

    def next(self):
        return self.__next__()

    def state_dict(self):
        """Where the loader is: the order of this epoch and the batches done (a
        checkpoint keeps it, since the next epoch's order is drawn when one ends)."""
        return {"index": np.array(self.index), "iteration": np.array(self.iteration),
                "batch_size": np.array(self.batch_size)}

    def load_state_dict(self, state):
        caller = f"{type(self).__name__}.load_state_dict"
        index, iteration = np.asarray(state["index"]), int(state["iteration"])
        if sorted(index.tolist()) != list(range(len(self.dataset))):
            raise ValueError(f"{caller}: the saved order is not one of this dataset's "
                             f"{len(self.dataset)} examples")
        if not 0 <= iteration <= self.max_iter:
            raise ValueError(f"{caller}: iteration {iteration} is not in 0..{self.max_iter}, "
                             f"the batches of an epoch")
        # Batches done mid-epoch are counted in the saved batch size; in another one
        # the rest of the epoch would skip or repeat examples.
        saved = int(state.get("batch_size", self.batch_size))
        if iteration and saved != self.batch_size:
            raise ValueError(f"{caller}: the state was saved mid-epoch with batch_size "
                             f"{saved}, not {self.batch_size}; resume with batch_size="
                             f"{saved}, or from a state saved between epochs")
        self.index, self.iteration = index, iteration

    def to_cpu(self):
        self.gpu = False

    def to_gpu(self):
        _require_cupy(f'{type(self).__name__}.to_gpu()')
        self.gpu = True


# =============================================================================
# Sequences for truncated BPTT: SeqDataLoader
# =============================================================================
class SeqDataLoader(DataLoader):
    """Yield batches that each take one step along `batch_size` parallel streams.

    The series is cut into batch_size streams that start data_size // batch_size
    apart; the k-th batch holds element k of every stream (wrapping around the
    end), so consecutive batches continue each stream one step, as truncated
    backpropagation through time expects. Never shuffled.
    """

    def __init__(self, dataset, batch_size, gpu=False):
        super().__init__(dataset=dataset, batch_size=batch_size, shuffle=False, gpu=gpu)

    def __next__(self):
        if self.iteration >= self.max_iter:
            self.reset()
            raise StopIteration

        jump = self.data_size // self.batch_size
        batch_index = [(i * jump + self.iteration) % self.data_size
                       for i in range(self.batch_size)]
        x, t = self._stack([self.dataset[j] for j in batch_index])
        self.iteration += 1
        return x, t
