"""DataLoader and SeqDataLoader: batch counts, order, shuffling, epochs and devices."""
import numpy as np
import pytest

from dezero import cuda
from dezero.dataloaders import DataLoader, SeqDataLoader
from dezero.datasets import Dataset


class Numbers(Dataset):
    """data[i] = [i, i] as float32, label[i] = i + 100."""

    def __init__(self, n, **kwargs):
        self.n = n
        super().__init__(**kwargs)

    def prepare(self):
        self.data = np.repeat(np.arange(self.n, dtype=np.float32)[:, None], 2, axis=1)
        self.label = np.arange(self.n) + 100


@pytest.fixture
def seeded_global_rng():
    """A fixed global RNG state for the test, restored afterwards."""
    state = np.random.get_state()
    np.random.set_state(np.random.RandomState(0).get_state())
    yield
    np.random.set_state(state)


def test_batches_in_order_with_a_partial_last_batch():
    loader = DataLoader(Numbers(10), batch_size=3, shuffle=False)
    batches = list(loader)
    assert len(loader) == 4 and len(batches) == 4
    assert [len(t) for _, t in batches] == [3, 3, 3, 1]
    x, t = batches[0]
    assert x.dtype == np.float32 and x.shape == (3, 2)
    np.testing.assert_array_equal(x[:, 0], [0, 1, 2])
    np.testing.assert_array_equal(t, [100, 101, 102])
    assert batches[3][1].tolist() == [109]


def test_exact_multiple_has_no_empty_batch():
    assert [len(t) for _, t in DataLoader(Numbers(6), batch_size=3, shuffle=False)] == [3, 3]


def test_shuffle_covers_every_example_once_and_reshuffles(seeded_global_rng):
    loader = DataLoader(Numbers(10), batch_size=4)
    epoch1 = np.concatenate([t for _, t in loader])
    epoch2 = np.concatenate([t for _, t in loader])
    assert sorted(epoch1.tolist()) == list(range(100, 110))
    assert sorted(epoch2.tolist()) == list(range(100, 110))
    assert epoch1.tolist() != list(range(100, 110))
    assert epoch1.tolist() != epoch2.tolist()


def test_shuffle_follows_the_global_rng(seeded_global_rng):
    state = np.random.get_state()
    first = np.concatenate([t for _, t in DataLoader(Numbers(10), batch_size=4)])
    np.random.set_state(state)
    again = np.concatenate([t for _, t in DataLoader(Numbers(10), batch_size=4)])
    np.testing.assert_array_equal(first, again)
    np.random.set_state(state)
    np.testing.assert_array_equal(first, np.random.permutation(10) + 100)


def test_next_and_reset():
    loader = DataLoader(Numbers(5), batch_size=2, shuffle=False)
    assert loader.next()[1].tolist() == [100, 101]
    assert next(loader)[1].tolist() == [102, 103]
    loader.reset()
    assert loader.iteration == 0
    assert loader.next()[1].tolist() == [100, 101]
    loader.next()
    loader.next()
    with pytest.raises(StopIteration):
        loader.next()
    assert loader.iteration == 0            # ready for the next epoch


def test_plain_list_of_pairs_works():
    data = [(np.float32([i]), i) for i in range(5)]
    x, t = DataLoader(data, batch_size=5, shuffle=False).next()
    assert x.shape == (5, 1) and t.tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize('batch_size', [0, -1, 2.5])
def test_bad_batch_size(batch_size):
    with pytest.raises(ValueError, match='batch_size'):
        DataLoader(Numbers(4), batch_size=batch_size)


@pytest.mark.skipif(cuda.gpu_enable, reason='cupy finds a GPU')
def test_gpu_without_cupy_is_a_clear_error():
    loader = DataLoader(Numbers(4), batch_size=2)
    with pytest.raises(RuntimeError, match=r'DataLoader.to_gpu\(\) needs a GPU'):
        loader.to_gpu()
    assert loader.gpu is False
    with pytest.raises(RuntimeError, match=r'gpu=True\) needs a GPU'):
        DataLoader(Numbers(4), batch_size=2, gpu=True)
    loader.to_cpu()
    assert isinstance(loader.next()[0], np.ndarray)


@pytest.mark.skipif(not cuda.gpu_enable, reason='needs cupy and a GPU')
def test_gpu_batches_are_cupy_arrays():
    loader = DataLoader(Numbers(5), batch_size=2, shuffle=False, gpu=True)
    x, t = loader.next()
    assert isinstance(x, cuda.cupy.ndarray) and isinstance(t, cuda.cupy.ndarray)
    np.testing.assert_array_equal(cuda.as_numpy(t), [100, 101])
    loader.to_cpu()
    assert isinstance(loader.next()[0], np.ndarray)


def test_seq_data_loader_walks_parallel_streams():
    loader = SeqDataLoader(Numbers(10), batch_size=3)
    batches = [t - 100 for _, t in loader]
    # jump = 10 // 3 = 3: streams start at 0, 3, 6 and step by one per batch.
    assert [b.tolist() for b in batches] == [[0, 3, 6], [1, 4, 7], [2, 5, 8], [3, 6, 9]]
    assert not loader.shuffle
    # The next epoch starts again from the beginning.
    assert (loader.next()[1] - 100).tolist() == [0, 3, 6]


def test_seq_data_loader_on_an_uneven_length():
    # jump = 5 // 2 = 2 and ceil(5 / 2) = 3 batches, each of full batch_size.
    loader = SeqDataLoader(Numbers(5), batch_size=2)
    assert [(t - 100).tolist() for _, t in loader] == [[0, 2], [1, 3], [2, 4]]
