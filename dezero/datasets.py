"""Datasets: indexable (x, t) collections, generated or read from downloaded files.

datasets.py sits between the files on disk (downloads.py fetches them into the
cache directory) and dataloaders.py, which batches what a Dataset returns.
Spiral and SinCurve are generated; MNIST, CIFAR10/100 and Shakespear read the
original file formats (offline, a DownloadError says where to place a file);
CharText serves any text, by default source files of Python's own library, as
character ids for a small language model.

    x, t = dezero.datasets.Spiral(train=True)[0]
"""
import ast
import gzip
import os
import pickle
import struct
import sys
import tarfile
import zipfile
import zlib

import numpy as np

from dezero import cuda
from dezero.core import Variable
from dezero.downloads import get_cache_dir, get_file, make_cache_dir
from dezero.files import atomic_file
from dezero.transforms import Compose, Flatten, Normalize, ToFloat


# =============================================================================
# Base class: Dataset
# =============================================================================
def _identity(x):
    return x


class Dataset:
    """Holds `data` and `label` arrays, filled by `prepare()`, and serves one example at a time.

    transform is applied to each data item, target_transform to each label;
    None means no change. Subclasses override `prepare()`.
    """

    def __init__(self, train=True, transform=None, target_transform=None):
        self.train = train
        self.transform = _identity if transform is None else transform
        self.target_transform = _identity if target_transform is None else target_transform
        self.data = None
        self.label = None
        self.prepare()

    def __getitem__(self, index):
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(
                f'{type(self).__name__}[{index!r}]: a dataset returns one example for an int '
                f'index, not for {type(index).__name__}; use a DataLoader to get batches')
        x = self.transform(self.data[index])
        if self.label is None:
            return x, None
        return x, self.target_transform(self.label[index])

    def __len__(self):
        if self.data is None:
            raise TypeError(f'{type(self).__name__} has no data: its prepare() must set self.data')
        return len(self.data)

    def prepare(self):
        pass


# =============================================================================
# Toy datasets: get_spiral, Spiral
# =============================================================================
def get_spiral(train=True):
    """Three interleaved spirals of 100 points each: x float32 (300, 2), t int (300,).

    The numbers are the book's (seed 1984 for train, 2020 for test), drawn from
    a private RandomState so that the global numpy RNG is left untouched.
    """
    rng = np.random.RandomState(1984 if train else 2020)
    num_data, num_class = 100, 3
    # The book draws one randn() per point, class by class; one call of
    # randn(300) yields the same sequence in the same order.
    noise = rng.randn(num_class, num_data)
    rate = np.arange(num_data) / num_data
    radius = 1.0 * rate
    theta = np.arange(num_class)[:, None] * 4.0 + 4.0 * rate + noise * 0.2
    x = np.stack([radius * np.sin(theta), radius * np.cos(theta)], axis=-1)
    x = x.reshape(num_class * num_data, 2).astype(np.float32)
    t = np.repeat(np.arange(num_class), num_data)
    indices = rng.permutation(num_data * num_class)
    return x[indices], t[indices]


class Spiral(Dataset):
    """The spiral toy dataset: 300 two-dimensional points in 3 classes."""

    def prepare(self):
        self.data, self.label = get_spiral(self.train)


# =============================================================================
# Image datasets: MNIST, CIFAR10, CIFAR100
# =============================================================================
def _pyplot(caller):
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f'{caller} draws with matplotlib, which is not installed: '
                          f'pip install matplotlib') from None
    return plt


def _corrupt(path, error, what):
    """The error for a cached file that cannot be read: its path and what to do."""
    return ValueError(f'{path}: not {what} ({type(error).__name__}: {error}); the file is '
                      f'corrupt or cut short: delete it to download (or rebuild) it again')


def _read_idx(path, ndim):
    """Read a gzipped idx file of unsigned bytes (the MNIST format) into a uint8 array."""
    try:
        with gzip.open(path, 'rb') as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise ValueError(f'{path}: not a readable gzip file ({e}); '
                         f'delete it to download it again') from e
    # Header: two zero bytes, a type code (0x08 = unsigned byte), the number
    # of dimensions, then each dimension as a big-endian uint32.
    if len(raw) < 4 + 4 * ndim or raw[:3] != b'\x00\x00\x08' or raw[3] != ndim:
        raise ValueError(f'{path}: not an MNIST idx file of {ndim}-d unsigned bytes '
                         f'(header {raw[:4].hex()}, expected 000008{ndim:02x})')
    shape = struct.unpack(f'>{ndim}I', raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(shape)):
        raise ValueError(f'{path}: the header announces shape {shape} ({int(np.prod(shape))} '
                         f'bytes) but the file holds {data.size} bytes; it may be truncated')
    return data.reshape(shape)


# The book's default transforms. They hold no state, so one shared instance
# serves every dataset object.
MNIST_TRANSFORM = Compose([Flatten(), ToFloat(), Normalize(0., 255.)])
CIFAR_TRANSFORM = Compose([ToFloat(), Normalize(mean=0.5, std=0.5)])


class MNIST(Dataset):
    """Handwritten digits: data uint8 (N, 1, 28, 28), label uint8 (N,).

    The default transform flattens to 784 values and scales to [0, 1] float32.
    """
    # Every mirror serves the same bytes; downloads.KNOWN_FILES has their digests
    # under the first one.
    mirrors = ('https://ossci-datasets.s3.amazonaws.com/mnist/',
               'http://yann.lecun.com/exdb/mnist/')
    files = {True: ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
             False: ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')}

    def __init__(self, train=True,
                 transform=MNIST_TRANSFORM,
                 target_transform=None):
        super().__init__(train, transform, target_transform)

    def prepare(self):
        data_name, label_name = self.files[bool(self.train)]
        first, *others = self.mirrors
        data_path = get_file(first + data_name, mirrors=[m + data_name for m in others])
        label_path = get_file(first + label_name, mirrors=[m + label_name for m in others])
        self.data = self._load_data(data_path)
        self.label = self._load_label(label_path)
        if len(self.data) != len(self.label):
            raise ValueError(f'MNIST: {data_path} holds {len(self.data)} images but '
                             f'{label_path} holds {len(self.label)} labels')

    def _load_label(self, filepath):
        return _read_idx(filepath, 1)

    def _load_data(self, filepath):
        images = _read_idx(filepath, 3)
        return images.reshape(-1, 1, *images.shape[1:])

    def show(self, row=10, col=10):
        """Draw row x col random images in one grid (needs matplotlib)."""
        plt = _pyplot('MNIST.show()')
        H, W = self.data.shape[-2:]
        img = np.zeros((H * row, W * col))
        for r in range(row):
            for c in range(col):
                i = np.random.randint(0, len(self.data))
                img[r * H:(r + 1) * H, c * W:(c + 1) * W] = self.data[i].reshape(H, W)
        plt.imshow(img, cmap='gray', interpolation='nearest')
        plt.axis('off')
        plt.show()

    @staticmethod
    def labels():
        return {i: str(i) for i in range(10)}


def _reconstruct_ndarray():
    # numpy pickles an ndarray as a call of this function; asking an array for
    # it avoids naming numpy's private module, which moved in numpy 2.
    return np.empty(0).__reduce__()[0]


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles a CIFAR batch: dicts, lists, strings, numbers and uint8 arrays, nothing else.

    The only globals a CIFAR batch refers to are the three numpy names an
    ndarray needs; any other global means the file is no CIFAR batch, and
    loading it could run arbitrary code, so it is refused.
    """
    allowed = {('numpy.core.multiarray', '_reconstruct'): _reconstruct_ndarray(),
               ('numpy._core.multiarray', '_reconstruct'): _reconstruct_ndarray(),
               ('numpy', 'ndarray'): np.ndarray,
               ('numpy', 'dtype'): np.dtype}

    def __init__(self, file, source):
        # latin1 is how numpy arrays pickled by Python 2 (the official files) load.
        super().__init__(file, encoding='latin1')
        self.source = source

    def find_class(self, module, name):
        try:
            return self.allowed[module, name]
        except KeyError:
            raise _Refused(
                f'{self.source}: refers to {module}.{name}, which no CIFAR batch holds; '
                f'refusing to load it (the file is corrupt or not a CIFAR batch)') from None


class _Refused(pickle.UnpicklingError):
    """A pickle that names a global no CIFAR batch holds."""


def _read_cifar_batches(tar_path, member_names, label_key):
    """Read pickled batches out of a CIFAR python .tar.gz: data uint8 (N, 3, 32, 32), labels."""
    try:
        tar = tarfile.open(tar_path, 'r:gz')
    except (tarfile.TarError, OSError, EOFError) as e:
        raise ValueError(f'{tar_path}: not a readable .tar.gz ({e}); '
                         f'delete it to download it again') from e
    data, labels = [], []
    with tar:
        for name in member_names:
            source = f'{tar_path}:{name}'
            batch = _read_cifar_member(tar, tar_path, name)
            if not isinstance(batch, dict):
                raise ValueError(f'{source}: holds a {type(batch).__name__}, not a dict')
            batch = {k.decode('latin1') if isinstance(k, bytes) else k: v
                     for k, v in batch.items()}
            x, t = batch.get('data'), batch.get(label_key)
            if not (isinstance(x, np.ndarray) and x.dtype == np.uint8 and x.ndim == 2
                    and x.shape[1] == 3 * 32 * 32) or t is None or len(t) != len(x):
                raise ValueError(f'{source}: expected "data" uint8 (N, 3072) and "{label_key}" '
                                 f'of N ints; found keys {sorted(batch)}')
            data.append(x)
            labels.append(np.asarray(t, dtype=int))
    return np.concatenate(data).reshape(-1, 3, 32, 32), np.concatenate(labels)


def _read_cifar_member(tar, tar_path, name):
    """Unpickle one batch of the archive; a damaged archive is named, with the fix."""
    try:
        f = tar.extractfile(name)
    except KeyError:
        f = None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise _corrupt(tar_path, e, f'a readable CIFAR archive (looking for {name})') from e
    if f is None:
        raise ValueError(f'{tar_path} has no file {name}; it is not the CIFAR '
                         f'python archive (delete it to download it again)')
    try:
        with f:
            return _CifarUnpickler(f, f'{tar_path}:{name}').load()
    except _Refused:
        raise
    except Exception as e:  # a damaged pickle fails in many ways: all mean the same
        raise _corrupt(tar_path, e, f'a readable CIFAR archive (reading {name})') from e


class CIFAR10(Dataset):
    """Small colour images in 10 classes: data uint8 (N, 3, 32, 32), label int (N,).

    The default transform is the book's: float32, then (x - 0.5) / 0.5.
    """
    url = 'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz'

    def __init__(self, train=True,
                 transform=CIFAR_TRANSFORM,
                 target_transform=None):
        super().__init__(train, transform, target_transform)

    def _members(self):
        if self.train:
            return [f'cifar-10-batches-py/data_batch_{i}' for i in range(1, 6)]
        return ['cifar-10-batches-py/test_batch']

    def _cache_name(self):
        return self.url

    def _label_key(self):
        return 'labels'

    def prepare(self):
        # The arrays are cached as .npz next to the archive: later loads skip
        # the slow unpickling.
        self.data, self.label = load_cache_npz(self._cache_name(), self.train)
        if self.data is not None:
            return
        filepath = get_file(self.url)
        self.data, self.label = _read_cifar_batches(filepath, self._members(), self._label_key())
        save_cache_npz(self.data, self.label, self._cache_name(), self.train)

    def show(self, row=10, col=10):
        """Draw row x col random images in one grid (needs matplotlib)."""
        plt = _pyplot(f'{type(self).__name__}.show()')
        H, W = 32, 32
        img = np.zeros((H * row, W * col, 3))
        for r in range(row):
            for c in range(col):
                i = np.random.randint(0, len(self.data))
                img[r * H:(r + 1) * H, c * W:(c + 1) * W] = self.data[i].transpose(1, 2, 0) / 255
        plt.imshow(img, interpolation='nearest')
        plt.axis('off')
        plt.show()

    @staticmethod
    def labels():
        # The book spells the first class 'ariplane'; the dataset says 'airplane'.
        return dict(enumerate(['airplane', 'automobile', 'bird', 'cat', 'deer', 'dog', 'frog',
                               'horse', 'ship', 'truck']))


_CIFAR100_FINE = (
    'apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy bridge bus '
    'butterfly camel can castle caterpillar cattle chair chimpanzee clock cloud cockroach couch '
    'crab crocodile cup dinosaur dolphin elephant flatfish forest fox girl hamster house '
    'kangaroo keyboard lamp lawn_mower leopard lion lizard lobster man maple_tree motorcycle '
    'mountain mouse mushroom oak_tree orange orchid otter palm_tree pear pickup_truck pine_tree '
    'plain plate poppy porcupine possum rabbit raccoon ray road rocket rose sea seal shark shrew '
    'skunk skyscraper snail snake spider squirrel streetcar sunflower sweet_pepper table tank '
    'telephone television tiger tractor train trout tulip turtle wardrobe whale willow_tree wolf '
    'woman worm').split()
_CIFAR100_COARSE = [
    'aquatic mammals', 'fish', 'flowers', 'food containers', 'fruit and vegetables',
    'household electrical device', 'household furniture', 'insects', 'large carnivores',
    'large man-made outdoor things', 'large natural outdoor scenes',
    'large omnivores and herbivores', 'medium-sized mammals', 'non-insect invertebrates',
    'people', 'reptiles', 'small mammals', 'trees', 'vehicles 1', 'vehicles 2']


class CIFAR100(CIFAR10):
    """Small colour images in 100 fine classes grouped into 20 coarse ones.

    label_type: 'fine' (100 classes) or 'coarse' (20 superclasses).
    """
    url = 'https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz'

    def __init__(self, train=True,
                 transform=CIFAR_TRANSFORM,
                 target_transform=None, label_type='fine'):
        if label_type not in ('fine', 'coarse'):
            raise ValueError(f"CIFAR100(label_type={label_type!r}): use 'fine' or 'coarse'")
        self.label_type = label_type
        super().__init__(train, transform, target_transform)

    def _members(self):
        return ['cifar-100-python/train' if self.train else 'cifar-100-python/test']

    def _cache_name(self):
        # One cache per label type: the book kept one, so a coarse load after
        # a fine one silently returned fine labels.
        return f'{self.url}.{self.label_type}'

    def _label_key(self):
        return f'{self.label_type}_labels'

    @staticmethod
    def labels(label_type='fine'):
        if label_type not in ('fine', 'coarse'):
            raise ValueError(f"CIFAR100.labels(label_type={label_type!r}): "
                             f"use 'fine' or 'coarse'")
        names = _CIFAR100_FINE if label_type == 'fine' else _CIFAR100_COARSE
        return {i: name.replace('_', ' ') for i, name in enumerate(names)}


# =============================================================================
# Big datasets: ImageNet (labels only)
# =============================================================================
class ImageNet(Dataset):
    """Only the 1000 ImageNet class names, for models pretrained on ImageNet."""
    labels_url = ('https://gist.githubusercontent.com/yrevar/942d3a0ac09ec9e5eb3a/raw/'
                  '238f720ff059c1f82f368259d1ca4ffa5dd8f9f5/imagenet1000_clsidx_to_labels.txt')

    def __init__(self, *args, **kwargs):
        raise NotImplementedError('dezero.datasets.ImageNet provides only ImageNet.labels(); '
                                  'the images themselves are not downloadable here')

    @staticmethod
    def labels():
        """{class index: name} for the 1000 classes (downloaded once)."""
        path = get_file(ImageNet.labels_url)
        try:
            # The file is a Python dict literal; literal_eval reads it without running code.
            labels = ast.literal_eval(_read_text(path))
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as e:
            raise _corrupt(path, e, 'a Python dict literal of the class names') from e
        if not (isinstance(labels, dict) and all(isinstance(k, int) and isinstance(v, str)
                                                 for k, v in labels.items())):
            raise _corrupt(path, TypeError(f'it holds a {type(labels).__name__}'),
                           'a dict {class index: name}')
        return labels


# =============================================================================
# Sequential datasets: SinCurve, Shakespear, CharText
# =============================================================================
class SinCurve(Dataset):
    """A sine wave for next-value prediction: data[i] = y[i], label[i] = y[i + 1].

    train: sin with uniform noise in [-0.05, 0.05); test: cos without noise.
    As in the book, the values are float64 and the noise comes from the global
    numpy RNG (np.random.seed makes it reproducible).
    """

    def prepare(self):
        num_data = 1000
        x = np.linspace(0, 2 * np.pi, num_data)
        # Drawn for the test set too, so the global RNG advances as in the book.
        noise = np.random.uniform(-0.05, 0.05, size=x.shape)
        y = np.sin(x) + noise if self.train else np.cos(x)
        y = y.astype(np.float64)
        self.data = y[:-1][:, np.newaxis]
        self.label = y[1:][:, np.newaxis]


class Shakespear(Dataset):
    """Tiny Shakespeare as character ids: data[i] = id of char i, label[i] = id of char i+1.

    char_to_id and id_to_char map between characters and ids (in order of first use).
    """
    url = 'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt'

    def prepare(self):
        path = get_file(self.url, 'shakespear.txt')
        text = _read_text(path)
        char_to_id = {}
        for ch in text:
            char_to_id.setdefault(ch, len(char_to_id))
        indices = np.array([char_to_id[ch] for ch in text], dtype=int)
        self.data = indices[:-1]
        self.label = indices[1:]
        self.char_to_id = char_to_id
        self.id_to_char = {i: ch for ch, i in char_to_id.items()}


def _read_text(path):
    try:
        with open(path, encoding='utf-8') as f:
            return f.read()
    except UnicodeDecodeError as e:
        raise _corrupt(path, e, 'UTF-8 text') from e


# The standard library modules whose source is CharText's default corpus: single .py
# files in every CPython 3.10 and later (a venv reads its base install's), read in this
# order; in Python 3.11, 334 kB of ASCII text, 95 characters.
PYTHON_SOURCES = ('argparse.py', 'calendar.py', 'configparser.py', 'contextlib.py',
                  'difflib.py', 'pprint.py', 'textwrap.py')


def python_source_text():
    """CharText's default corpus: the source of the PYTHON_SOURCES modules of the
    running Python, read from its own library folder (no network), one after the
    other. The same text on every machine with the same Python version, unless a
    distribution patched one of these modules."""
    folder = os.path.dirname(os.__file__)
    parts = []
    for name in PYTHON_SOURCES:
        path = os.path.join(folder, name)
        try:
            with open(path, encoding='utf-8') as f:  # newlines read as '\n' everywhere
                parts.append(f.read())
        except OSError as e:
            raise FileNotFoundError(
                f'CharText: the default corpus is the source of Python modules in '
                f'{folder}, and {name} cannot be read there ({e}); give the text '
                f'yourself: CharText(text, block_size)') from e
    return ''.join(parts)


def _code_points(text):
    # One uint32 a character (lone surrogates pass as themselves).
    return np.frombuffer(text.encode('utf-32-le', 'surrogatepass'), dtype=np.uint32)


class CharText(Dataset):
    """A text as character ids, for next-character prediction (a small GPT's data).

    The vocabulary is the sorted set of the text's characters (`vocab`, a str, and
    `vocab_size`), shared by both splits; `encode(str)` gives int64 ids and
    `decode(ids)` the str back. The first 1 - val_fraction of the text (90%, as
    nanoGPT) is the training split, the rest the validation split (train=False).
    Example i is the window x = ids[i:i + block_size] and its next characters
    t = ids[i + 1:i + block_size + 1], so a DataLoader batches (B, block_size)
    pairs; `get_batch(batch_size)` draws random windows instead. text defaults to
    python_source_text(), the source of a few modules of Python's own library.

        train = CharText(block_size=64); x, t = train.get_batch(32)
        print(train.decode(x[0]))
    """

    def __init__(self, text=None, block_size=64, train=True, val_fraction=0.1):
        if text is not None and not isinstance(text, str):
            hint = ' (decode bytes first: data.decode("utf-8"))' if isinstance(
                text, bytes | bytearray) else ''
            raise TypeError(f'CharText: text must be a str, got {type(text).__name__}{hint}')
        if isinstance(block_size, bool) or not isinstance(block_size, int | np.integer) \
                or block_size < 1:
            raise ValueError(f'CharText: block_size must be a positive int, got {block_size!r}')
        if not 0 <= val_fraction < 1:
            raise ValueError(f'CharText: val_fraction must be in [0, 1), got {val_fraction!r}')
        self.text = python_source_text() if text is None else text
        self.block_size, self.val_fraction = int(block_size), val_fraction
        super().__init__(train)

    def prepare(self):
        codes = _code_points(self.text)
        self._codes = np.unique(codes)  # sorted: id i is the i-th smallest character
        self.vocab = self._codes.astype('<u4').tobytes().decode('utf-32-le', 'surrogatepass')
        self.char_to_id = {ch: i for i, ch in enumerate(self.vocab)}
        self.id_to_char = dict(enumerate(self.vocab))
        ids = np.searchsorted(self._codes, codes).astype(np.int64)
        cut = int(len(ids) * (1 - self.val_fraction))
        self.ids = ids[:cut] if self.train else ids[cut:]
        if len(self.ids) <= self.block_size:
            split = 'training' if self.train else 'validation'
            raise ValueError(
                f'CharText: block_size {self.block_size} needs more than {self.block_size} '
                f'characters, and the {split} split has {len(self.ids)} (of a text of '
                f'{len(ids)}, val_fraction={self.val_fraction}); use a smaller block_size '
                f'or a longer text')
        windows = np.lib.stride_tricks.sliding_window_view
        self.data = windows(self.ids[:-1], self.block_size)  # views: no copies
        self.label = windows(self.ids[1:], self.block_size)

    @property
    def vocab_size(self):
        return len(self.vocab)

    def encode(self, text):
        """The ids of text's characters, an int64 array; a character outside the
        vocabulary is a ValueError naming it."""
        if not isinstance(text, str):
            raise TypeError(f'CharText.encode: takes a str, got {type(text).__name__}')
        codes = _code_points(text)
        ids = np.searchsorted(self._codes, codes)
        known = self._codes[np.minimum(ids, len(self._codes) - 1)] == codes
        if not known.all():
            first = int(np.argmin(known))
            unknown = ''.join(sorted({text[i] for i in np.flatnonzero(~known)}))
            raise ValueError(
                f'CharText.encode: {unknown!r} not in the vocabulary (first at position '
                f'{first}: {text[first]!r}); the vocabulary has the {self.vocab_size} '
                f'characters of the text the dataset was made from')
        return ids.astype(np.int64)

    def decode(self, ids):
        """The str of a sequence of ids (a list, a numpy or cupy array, a Variable),
        or the character of one id."""
        ids = cuda.as_numpy(ids) if isinstance(ids, (Variable, *cuda.array_types)) else \
            np.asarray(ids)
        if ids.ndim == 0:  # one id: one character
            ids = ids.reshape(1)
        if ids.size == 0:
            return ''
        if ids.dtype.kind not in 'iu':
            raise TypeError(f'CharText.decode: ids must be integers, got {ids.dtype} '
                            f'(the argmax of logits, or a sample drawn from them, gives them)')
        if ids.ndim != 1:
            raise ValueError(f'CharText.decode: takes one sequence of ids, got shape '
                             f'{ids.shape}; decode each row: [data.decode(row) for row in ids]')
        wrong = (ids < 0) | (ids >= self.vocab_size)
        if wrong.any():
            raise ValueError(f'CharText.decode: id {int(ids[wrong][0])} at position '
                             f'{int(np.argmax(wrong))} is not in 0..{self.vocab_size - 1}, '
                             f'the ids of the vocabulary')
        return self._codes[ids].astype('<u4').tobytes().decode('utf-32-le', 'surrogatepass')

    def get_batch(self, batch_size, rng=None):
        """batch_size windows at random places: (x, t), two int64 arrays of shape
        (batch_size, block_size), t being x shifted by one character. rng: a numpy
        Generator or RandomState; by default numpy's global one (np.random.seed
        repeats the draws, and a checkpoint keeps its state)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer) \
                or batch_size < 1:
            raise ValueError(f'CharText.get_batch: batch_size must be a positive int, '
                             f'got {batch_size!r}')
        if rng is None:
            rng = np.random
        if isinstance(rng, np.random.Generator):
            starts = rng.integers(0, len(self), size=batch_size)
        elif isinstance(rng, np.random.RandomState) or rng is np.random:
            starts = rng.randint(0, len(self), size=batch_size)
        else:
            raise TypeError(f'CharText.get_batch: rng must be a numpy Generator or '
                            f'RandomState, got {type(rng).__name__}')
        return self.data[starts], self.label[starts]


# =============================================================================
# Array cache: load_cache_npz, save_cache_npz
# =============================================================================
def _cache_npz_path(filename, train):
    name = filename[filename.rfind('/') + 1:]
    return os.path.join(get_cache_dir(), name + ('.train.npz' if train else '.test.npz'))


def load_cache_npz(filename, train=False):
    """(data, label) saved by save_cache_npz for `filename` (a URL or name), or (None, None)."""
    path = _cache_npz_path(filename, train)
    if not os.path.exists(path):
        return None, None
    try:
        with np.load(path, allow_pickle=False) as loaded:
            data, label = loaded['data'], loaded['label']
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error,
            NotImplementedError) as e:  # zipfile: a damaged method, version or flag
        raise _corrupt(path, e, 'a dataset cache with arrays "data" and "label"') from e
    if len(data) != len(label):
        raise _corrupt(path, ValueError(f'{len(data)} examples but {len(label)} labels'),
                       'a consistent dataset cache')
    return data, label


def save_cache_npz(data, label, filename, train=False):
    """Save (data, label) as a compressed .npz in the cache directory; return its path."""
    path = _cache_npz_path(filename, train)
    if os.path.exists(path):
        return path
    make_cache_dir(os.path.dirname(path))
    print(f'Saving {os.path.basename(path)} ...', file=sys.stderr)
    # Written under a temporary name and renamed, so no half-written cache survives.
    with atomic_file(path) as f:
        np.savez_compressed(f, data=data, label=label)
    return path
