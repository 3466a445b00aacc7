"""Datasets: the book's spiral and sine data, and readers for the real file formats.

MNIST, CIFAR and the text datasets are read from tiny files that the tests write
in the official formats into a temporary DEZERO_CACHE_DIR; the network is never
used (urlopen is replaced by a fake that fails).
"""
import gzip
import io
import os
import pickle
import struct
import tarfile
import urllib.error
import urllib.request

import numpy as np
import pytest
from zip_damage import FIELDS, damaged

import dezero
from dezero.datasets import (
    CIFAR10,
    CIFAR100,
    MNIST,
    CharText,
    Dataset,
    ImageNet,
    Shakespear,
    SinCurve,
    Spiral,
    get_spiral,
)
from dezero.downloads import DownloadError


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any download attempt fails as it would offline, and is recorded."""
    asked = []

    def fake_urlopen(url, timeout=None):
        asked.append(url)
        raise urllib.error.URLError(OSError(101, 'Network is unreachable'))
    monkeypatch.setattr(urllib.request, 'urlopen', fake_urlopen)
    return asked


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv('DEZERO_CACHE_DIR', str(tmp_path))
    # The tiny files the tests write stand in for the real ones, whose digests
    # downloads.KNOWN_FILES would otherwise check on every cache hit.
    monkeypatch.setenv('DEZERO_TRUST_CACHE', '1')
    return tmp_path


@pytest.fixture
def global_rng():
    """Restore the global numpy RNG after a test that draws from it."""
    state = np.random.get_state()
    yield
    np.random.set_state(state)


# =============================================================================
# Spiral and SinCurve
# =============================================================================
def book_spiral(train):
    """The book's recipe, global seed and all, inside a saved and restored RNG state."""
    state = np.random.get_state()
    try:
        np.random.seed(seed=1984 if train else 2020)
        num_data, num_class = 100, 3
        x = np.zeros((num_data * num_class, 2), dtype=np.float32)
        t = np.zeros(num_data * num_class, dtype=int)
        for j in range(num_class):
            for i in range(num_data):
                rate = i / num_data
                radius = 1.0 * rate
                theta = j * 4.0 + 4.0 * rate + np.random.randn() * 0.2
                ix = num_data * j + i
                x[ix] = np.array([radius * np.sin(theta), radius * np.cos(theta)]).flatten()
                t[ix] = j
        indices = np.random.permutation(num_data * num_class)
        return x[indices], t[indices]
    finally:
        np.random.set_state(state)


@pytest.mark.parametrize('train', [True, False])
def test_get_spiral_equals_the_book(train):
    x, t = get_spiral(train)
    x_book, t_book = book_spiral(train)
    assert x.dtype == np.float32 and x.shape == (300, 2)
    assert np.issubdtype(t.dtype, np.integer) and t.shape == (300,)
    np.testing.assert_array_equal(x, x_book)
    np.testing.assert_array_equal(t, t_book)
    assert np.bincount(t).tolist() == [100, 100, 100]


def test_get_spiral_leaves_the_global_rng_alone(global_rng):
    before = np.random.get_state()
    get_spiral(True)
    Spiral(train=False)
    after = np.random.get_state()
    assert before[0] == after[0] and before[2:] == after[2:]
    np.testing.assert_array_equal(before[1], after[1])


def test_spiral_train_and_test_differ():
    assert not np.array_equal(Spiral(train=True).data, Spiral(train=False).data)


def test_dataset_applies_transform_and_target_transform():
    plain = Spiral()
    assert len(plain) == 300
    x, t = plain[5]
    np.testing.assert_array_equal(x, plain.data[5])
    assert t == plain.label[5]
    dataset = Spiral(transform=lambda x: x * 2, target_transform=lambda t: t + 10)
    x2, t2 = dataset[np.int64(5)]        # numpy ints index too (DataLoader passes them)
    np.testing.assert_array_equal(x2, plain.data[5] * 2)
    assert t2 == plain.label[5] + 10


@pytest.mark.parametrize('index', [slice(0, 2), 1.0, [0, 1], True])
def test_dataset_rejects_non_int_indexes(index):
    with pytest.raises(TypeError, match='one example'):
        Spiral()[index]


def test_dataset_without_labels_returns_none():
    class Unlabelled(Dataset):
        def prepare(self):
            self.data = np.arange(4)
    assert Unlabelled()[2] == (2, None)
    assert len(Unlabelled()) == 4


def test_dataset_without_data_has_a_clear_len_error():
    with pytest.raises(TypeError, match='prepare'):
        len(Dataset())


def test_sincurve_train_is_noisy_sine_shifted_by_one(global_rng):
    dataset = SinCurve(train=True)
    x = np.linspace(0, 2 * np.pi, 1000)
    assert dataset.data.shape == (999, 1) and dataset.label.shape == (999, 1)
    assert dataset.data.dtype == np.float64                    # as in the book
    np.testing.assert_array_equal(dataset.data[1:], dataset.label[:-1])
    noise = dataset.data[:, 0] - np.sin(x[:-1])
    assert np.all(np.abs(noise) <= 0.05) and noise.std() > 0.01


def test_sincurve_test_is_cosine_without_noise(global_rng):
    dataset = SinCurve(train=False)
    x = np.linspace(0, 2 * np.pi, 1000)
    np.testing.assert_array_equal(dataset.data[:, 0], np.cos(x)[:-1])
    np.testing.assert_array_equal(dataset.label[:, 0], np.cos(x)[1:])


def test_sincurve_noise_follows_the_global_rng(global_rng):
    state = np.random.get_state()
    first = SinCurve().data
    np.random.set_state(state)
    np.testing.assert_array_equal(SinCurve().data, first)


# =============================================================================
# MNIST: gzipped idx files
# =============================================================================
def write_idx(path, array):
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f'>{array.ndim}I', *array.shape)
    with gzip.open(path, 'wb') as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_mnist(cache, n_train=5, n_test=3):
    rng = np.random.RandomState(0)
    arrays = {}
    for split, n in (('train', n_train), ('t10k', n_test)):
        images = rng.randint(0, 256, size=(n, 28, 28)).astype(np.uint8)
        labels = rng.randint(0, 10, size=n).astype(np.uint8)
        write_idx(cache / f'{split}-images-idx3-ubyte.gz', images)
        write_idx(cache / f'{split}-labels-idx1-ubyte.gz', labels)
        arrays[split] = images, labels
    return arrays


def test_mnist_reads_idx_files(cache, no_network):
    arrays = write_mnist(cache)
    for train, split in ((True, 'train'), (False, 't10k')):
        images, labels = arrays[split]
        dataset = MNIST(train=train)
        assert dataset.data.dtype == np.uint8
        assert dataset.data.shape == (len(images), 1, 28, 28)
        np.testing.assert_array_equal(dataset.data[:, 0], images)
        np.testing.assert_array_equal(dataset.label, labels)
        x, t = dataset[1]       # the book's default transform: flat float32 in [0, 1]
        assert x.dtype == np.float32 and x.shape == (784,)
        np.testing.assert_allclose(x, images[1].reshape(-1) / 255.0, rtol=1e-6)
        assert t == labels[1]
    assert no_network == []


def test_mnist_rejects_a_file_that_is_not_idx(cache):
    write_mnist(cache)
    with gzip.open(cache / 'train-images-idx3-ubyte.gz', 'wb') as f:
        f.write(b'not an idx file at all')
    with pytest.raises(ValueError, match='train-images-idx3-ubyte.gz: not an MNIST idx'):
        MNIST(train=True)


def test_mnist_rejects_a_truncated_file(cache):
    write_mnist(cache)
    path = cache / 'train-labels-idx1-ubyte.gz'
    with gzip.open(path, 'wb') as f:
        f.write(bytes([0, 0, 8, 1]) + struct.pack('>I', 5) + b'\x01\x02')
    with pytest.raises(ValueError, match='truncated'):
        MNIST(train=True)


def test_mnist_offline_error_says_where_to_place_the_file(cache, no_network):
    with pytest.raises(DownloadError) as info:
        MNIST(train=True)
    message = str(info.value)
    assert 'train-images-idx3-ubyte.gz' in message
    for base in MNIST.mirrors:
        assert base + 'train-images-idx3-ubyte.gz' in message
    assert os.path.join(str(cache), 'train-images-idx3-ubyte.gz') in message
    assert len(no_network) == len(MNIST.mirrors)
    assert os.listdir(cache) == []


def test_mnist_labels():
    assert MNIST.labels() == {i: str(i) for i in range(10)}


def test_mnist_show_draws_a_grid(cache, monkeypatch, global_rng):
    pytest.importorskip('matplotlib')
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    write_mnist(cache)
    shown = []
    monkeypatch.setattr(plt, 'show', lambda: shown.append(plt.gca().images[-1].get_array()))
    MNIST().show(row=2, col=3)
    plt.close('all')
    assert shown[0].shape == (56, 84)


# =============================================================================
# CIFAR-10 / CIFAR-100: tar.gz of batches pickled by Python 2
# =============================================================================
def py2_pickle(obj):
    """Pickle `obj` the way Python 2's cPickle wrote the CIFAR batches (protocol 2).

    bytes stand for Python 2 str; uint8 arrays go through numpy's _reconstruct,
    as in the official files.
    """
    out = [b'\x80\x02']

    def put(o):
        if isinstance(o, dict):
            out.append(b'}(')
            for k, v in o.items():
                put(k)
                put(v)
            out.append(b'u')
        elif isinstance(o, list | tuple):
            out.append(b'](' if isinstance(o, list) else b'(')
            for v in o:
                put(v)
            out.append(b'e' if isinstance(o, list) else b't')
        elif o is None:
            out.append(b'N')
        elif isinstance(o, bool):
            out.append(b'\x88' if o else b'\x89')
        elif isinstance(o, int):
            out.append(b'J' + struct.pack('<i', o))
        elif isinstance(o, bytes):
            out.append(b'T' + struct.pack('<I', len(o)) + o)
        elif isinstance(o, np.dtype):
            out.append(b'cnumpy\ndtype\n')
            put((b'u1', 0, 1))
            out.append(b'R')
            put((3, b'|', None, None, None, -1, -1, 0))
            out.append(b'b')
        elif isinstance(o, np.ndarray):
            out.append(b'cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n')
            put((0,))
            put(b'b')
            out.append(b'\x87R')
            put((1, o.shape, o.dtype, False, o.tobytes()))
            out.append(b'b')
        else:
            raise TypeError(type(o))
    put(obj)
    out.append(b'.')
    return b''.join(out)


def write_tar(path, members):
    with tarfile.open(path, 'w:gz') as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def cifar_batch(rng, n, label_keys):
    batch = {b'batch_label': b'a batch',
             b'data': rng.randint(0, 256, size=(n, 3072)).astype(np.uint8),
             b'filenames': [b'img_%d.png' % i for i in range(n)]}
    for key, classes in label_keys.items():
        batch[key] = [int(v) for v in rng.randint(0, classes, size=n)]
    return batch


def write_cifar10(cache):
    rng = np.random.RandomState(1)
    batches = {f'cifar-10-batches-py/data_batch_{i}': cifar_batch(rng, 2, {b'labels': 10})
               for i in range(1, 6)}
    batches['cifar-10-batches-py/test_batch'] = cifar_batch(rng, 3, {b'labels': 10})
    members = {name: py2_pickle(batch) for name, batch in batches.items()}
    members['cifar-10-batches-py/batches.meta'] = py2_pickle({b'label_names': [b'airplane']})
    write_tar(cache / 'cifar-10-python.tar.gz', members)
    return batches


def test_cifar10_reads_the_python_archive(cache, no_network):
    batches = write_cifar10(cache)
    train = CIFAR10(train=True)
    expected = np.concatenate([batches[f'cifar-10-batches-py/data_batch_{i}'][b'data']
                               for i in range(1, 6)])
    assert train.data.dtype == np.uint8 and train.data.shape == (10, 3, 32, 32)
    np.testing.assert_array_equal(train.data.reshape(10, -1), expected)
    assert train.label.tolist() == sum((batches[f'cifar-10-batches-py/data_batch_{i}'][b'labels']
                                        for i in range(1, 6)), [])
    x, t = train[0]      # the book's default transform: float32 (x - 0.5) / 0.5
    assert x.dtype == np.float32
    np.testing.assert_allclose(x, (train.data[0].astype(np.float32) - 0.5) / 0.5)

    test = CIFAR10(train=False)
    assert test.data.shape == (3, 3, 32, 32)
    assert test.label.tolist() == batches['cifar-10-batches-py/test_batch'][b'labels']
    assert no_network == []


def test_cifar10_second_load_comes_from_the_npz_cache(cache):
    write_cifar10(cache)
    first = CIFAR10(train=True)
    assert (cache / 'cifar-10-python.tar.gz.train.npz').exists()
    os.remove(cache / 'cifar-10-python.tar.gz')
    again = CIFAR10(train=True)
    np.testing.assert_array_equal(again.data, first.data)
    np.testing.assert_array_equal(again.label, first.label)


def test_cifar100_fine_and_coarse_labels_are_cached_apart(cache):
    rng = np.random.RandomState(2)
    keys = {b'fine_labels': 100, b'coarse_labels': 20}
    train, test = cifar_batch(rng, 4, keys), cifar_batch(rng, 2, keys)
    write_tar(cache / 'cifar-100-python.tar.gz',
              {'cifar-100-python/train': py2_pickle(train),
               'cifar-100-python/test': py2_pickle(test)})
    fine = CIFAR100(train=True)
    coarse = CIFAR100(train=True, label_type='coarse')
    assert fine.data.shape == (4, 3, 32, 32)
    assert fine.label.tolist() == train[b'fine_labels']
    assert coarse.label.tolist() == train[b'coarse_labels']
    assert CIFAR100(train=False, label_type='coarse').label.tolist() == test[b'coarse_labels']
    with pytest.raises(ValueError, match="'fine' or 'coarse'"):
        CIFAR100(label_type='medium')


def test_cifar_refuses_pickles_that_call_other_code(cache, capsys):
    class Payload:
        def __reduce__(self):
            return (print, ('this must never run',))
    write_tar(cache / 'cifar-10-python.tar.gz',
              {'cifar-10-batches-py/test_batch': pickle.dumps({'data': Payload()}, protocol=2)})
    with pytest.raises(pickle.UnpicklingError, match=r'\.print, which no CIFAR batch holds'):
        CIFAR10(train=False)
    assert 'never run' not in capsys.readouterr().out


def test_cifar_names_a_missing_batch(cache):
    write_tar(cache / 'cifar-10-python.tar.gz', {'something/else': b''})
    with pytest.raises(ValueError, match='no file cifar-10-batches-py/test_batch'):
        CIFAR10(train=False)


def test_a_cut_short_cifar_archive_names_the_file_to_delete(cache):
    write_cifar10(cache)
    archive = cache / 'cifar-10-python.tar.gz'
    archive.write_bytes(archive.read_bytes()[:len(archive.read_bytes()) // 2])
    with pytest.raises(ValueError) as info:
        CIFAR10(train=True)
    message = str(info.value)
    assert message.startswith(str(archive)) and 'delete it' in message


@pytest.mark.parametrize('content', [b'not a zip file at all', None, *sorted(FIELDS)],
                         ids=['garbage', 'no-label', *sorted(FIELDS)])
def test_a_corrupt_cifar_cache_names_the_file_to_delete(cache, content):
    write_cifar10(cache)
    npz = cache / 'cifar-10-python.tar.gz.train.npz'
    if content is None:
        np.savez(npz, data=np.zeros((2, 3, 32, 32), np.uint8))  # "label" missing
    elif content in FIELDS:  # a damage zipfile calls unsupported (NotImplementedError)
        CIFAR10(train=True)  # writes the cache
        npz.write_bytes(damaged(npz.read_bytes(), content))
    else:
        npz.write_bytes(content)
    with pytest.raises(ValueError) as info:
        CIFAR10(train=True)
    message = str(info.value)
    assert message.startswith(str(npz)) and 'delete it' in message
    os.remove(npz)
    assert CIFAR10(train=True).data.shape == (10, 3, 32, 32)  # rebuilt from the archive


def test_cifar_offline_error(cache):
    with pytest.raises(DownloadError) as info:
        CIFAR10(train=True)
    message = str(info.value)
    assert CIFAR10.url in message
    assert os.path.join(str(cache), 'cifar-10-python.tar.gz') in message


def test_cifar_labels():
    assert CIFAR10.labels()[0] == 'airplane' and len(CIFAR10.labels()) == 10
    fine, coarse = CIFAR100.labels('fine'), CIFAR100.labels('coarse')
    assert len(fine) == 100 and len(set(fine.values())) == 100
    assert fine[0] == 'apple' and fine[99] == 'worm' and fine[1] == 'aquarium fish'
    assert len(coarse) == 20 and coarse[0] == 'aquatic mammals'


# =============================================================================
# Text files: Shakespear, ImageNet labels
# =============================================================================
def test_shakespear_reads_characters_as_ids(cache):
    (cache / 'shakespear.txt').write_text('First Citizen:\nBefore we proceed', encoding='utf-8')
    dataset = Shakespear()
    text = 'First Citizen:\nBefore we proceed'
    assert ''.join(dataset.id_to_char[i] for i in dataset.data) == text[:-1]
    assert ''.join(dataset.id_to_char[i] for i in dataset.label) == text[1:]
    assert dataset.char_to_id['F'] == 0 and dataset.char_to_id['i'] == 1
    assert len(dataset.char_to_id) == len(set(text))


def test_imagenet_labels_read_without_eval(cache):
    (cache / 'imagenet1000_clsidx_to_labels.txt').write_text(
        "{0: 'tench, Tinca tinca',\n 1: 'goldfish, Carassius auratus'}", encoding='utf-8')
    assert ImageNet.labels() == {0: 'tench, Tinca tinca', 1: 'goldfish, Carassius auratus'}
    (cache / 'imagenet1000_clsidx_to_labels.txt').write_text("__import__('os')")
    with pytest.raises(ValueError):
        ImageNet.labels()


def test_a_text_dataset_that_is_not_utf8_names_the_file_to_delete(cache):
    path = cache / 'shakespear.txt'
    path.write_bytes('First Citizen:'.encode('utf-16'))
    with pytest.raises(ValueError) as info:
        Shakespear()
    message = str(info.value)
    assert message.startswith(str(path)) and 'UTF-8' in message and 'delete it' in message


@pytest.mark.parametrize('content', [
    b"{0: 'tench',\n 1: 'goldfish'",                # cut short
    b"['tench', 'goldfish']",                      # not a dict
    b"{'0': 'tench'}",                             # keys are not class indexes
    "{0: 'tench'}".encode('utf-16'),               # not UTF-8
], ids=['cut-short', 'list', 'str-keys', 'utf16'])
def test_a_malformed_imagenet_labels_file_names_the_file_to_delete(cache, content):
    path = cache / 'imagenet1000_clsidx_to_labels.txt'
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        ImageNet.labels()
    message = str(info.value)
    assert message.startswith(str(path)) and 'delete it' in message


def test_imagenet_images_are_not_provided():
    with pytest.raises(NotImplementedError, match='labels'):
        ImageNet()


# =============================================================================
# CharText: characters as ids, windows, splits, the default corpus
# =============================================================================
TEXT = 'hello world, hello dezero\n' * 4  # 104 characters


def test_char_text_vocabulary_encode_and_decode():
    data = CharText(TEXT, block_size=8)
    assert data.vocab == ''.join(sorted(set(TEXT))) and data.vocab_size == len(set(TEXT))
    ids = data.encode('hello dezero')
    assert ids.dtype == np.int64
    np.testing.assert_array_equal(ids, [data.vocab.index(ch) for ch in 'hello dezero'])
    assert data.decode(ids) == 'hello dezero' and data.decode(list(ids)) == 'hello dezero'
    assert data.decode(dezero.Variable(ids)) == 'hello dezero'
    assert data.decode(ids[0]) == 'h' and data.decode([]) == ''
    assert data.char_to_id['h'] == ids[0] and data.id_to_char[int(ids[0])] == 'h'


def test_char_text_examples_are_windows_with_the_next_characters():
    data = CharText(TEXT, block_size=8)
    ids = data.encode(TEXT)
    cut = int(len(TEXT) * 0.9)  # 93 characters to train on, 11 to validate
    np.testing.assert_array_equal(data.ids, ids[:cut])
    assert len(data) == cut - 8
    for i in (0, 5, len(data) - 1):
        x, t = data[i]
        np.testing.assert_array_equal(x, ids[i:i + 8])
        np.testing.assert_array_equal(t, ids[i + 1:i + 9])
    validation = CharText(TEXT, block_size=8, train=False)
    assert validation.vocab == data.vocab  # one vocabulary for both splits
    np.testing.assert_array_equal(validation.ids, ids[cut:])
    assert len(validation) == len(TEXT) - cut - 8
    x, t = next(iter(dezero.DataLoader(data, batch_size=4, shuffle=False)))
    assert x.shape == t.shape == (4, 8) and x.dtype == np.int64
    np.testing.assert_array_equal(t[:, :-1], x[:, 1:])
    np.testing.assert_array_equal(x[1], ids[1:9])


def test_char_text_get_batch_draws_random_windows_repeatably(global_rng):
    data = CharText(TEXT, block_size=8)
    x, t = data.get_batch(16, rng=np.random.default_rng(0))
    assert x.shape == t.shape == (16, 8) and x.dtype == t.dtype == np.int64
    for row_x, row_t in zip(x, t):
        text = data.decode(np.concatenate([row_x, row_t[-1:]]))
        assert text in TEXT[:int(len(TEXT) * 0.9)]  # a window of the training split
    again, _ = data.get_batch(16, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(again, x)
    np.random.seed(1)
    first, _ = data.get_batch(4)
    np.random.seed(1)
    np.testing.assert_array_equal(data.get_batch(4)[0], first)  # the global RNG by default
    np.testing.assert_array_equal(data.get_batch(4, np.random.RandomState(2))[0],
                                  data.get_batch(4, np.random.RandomState(2))[0])
    with pytest.raises(TypeError, match='rng must be a numpy Generator or RandomState'):
        data.get_batch(4, rng=3)
    with pytest.raises(ValueError, match='batch_size must be a positive int, got 0'):
        data.get_batch(0)


def test_char_text_refuses_bad_input_naming_it():
    data = CharText(TEXT, block_size=8)
    with pytest.raises(ValueError, match=r"CharText.encode: 'QZ' not in the vocabulary "
                                         r"\(first at position 6: 'Z'\); the vocabulary "
                                         r"has the \d+ characters"):
        data.encode('hello Z Q')
    with pytest.raises(ValueError, match=r'id 99 at position 1 is not in 0..\d+'):
        data.decode([0, 99])
    with pytest.raises(ValueError, match=r'id -1 at position 0'):
        data.decode(np.array([-1]))
    with pytest.raises(TypeError, match='ids must be integers, got float32'):
        data.decode(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r'one sequence of ids, got shape \(2, 8\).*'
                                         r'\[data.decode\(row\) for row in ids\]'):
        data.decode(data.get_batch(2)[0])
    with pytest.raises(TypeError, match='encode: takes a str'):
        data.encode([1, 2])
    with pytest.raises(ValueError, match=r'block_size 200 needs more than 200 characters, '
                                         r'and the training split has 93 \(of a text of '
                                         r'104, val_fraction=0.1\); use a smaller'):
        CharText(TEXT, block_size=200)
    with pytest.raises(ValueError, match='the validation split has 11'):
        CharText(TEXT, block_size=11, train=False)
    with pytest.raises(ValueError, match='block_size must be a positive int'):
        CharText(TEXT, block_size=0)
    with pytest.raises(ValueError, match=r'val_fraction must be in \[0, 1\)'):
        CharText(TEXT, val_fraction=1.0)
    with pytest.raises(TypeError, match=r'text must be a str, got bytes \(decode bytes'):
        CharText(TEXT.encode(), block_size=8)


def test_char_text_default_corpus_is_python_s_own_library_source(no_network):
    import dezero.datasets as D
    text = D.python_source_text()
    folder = os.path.dirname(os.__file__)
    expected = ''
    for name in D.PYTHON_SOURCES:
        with open(os.path.join(folder, name), encoding='utf-8') as f:
            expected += f.read()
    assert text == expected and len(text) >= 100_000  # enough to learn from
    data = CharText(block_size=32)
    assert data.text == text and data.vocab_size < 200
    assert len(data) + len(CharText(block_size=32, train=False)) == len(text) - 64
    assert data.decode(data.encode('def __init__(self):')) == 'def __init__(self):'
    assert no_network == []  # nothing downloaded


def test_char_text_says_how_to_go_on_without_the_default_corpus(monkeypatch):
    import dezero.datasets as D
    monkeypatch.setattr(D, 'PYTHON_SOURCES', ('argparse.py', 'no_such_module.py'))
    with pytest.raises(FileNotFoundError, match=r'no_such_module.py cannot be read there.*'
                                                r'CharText\(text, block_size\)'):
        CharText()
