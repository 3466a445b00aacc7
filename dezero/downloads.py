"""Download files once and keep them in a cache directory.

downloads.py sits under datasets.py (and under pretrained weights in models.py):
everything that comes from the network goes through `get_file`, which returns
a local path, downloading into the cache only when the file is not there yet.
Offline, it raises a `DownloadError` that says where to place the file by hand.
A download is kept only when complete (Content-Length) and, for the files in
KNOWN_FILES, when its size and sha256 are right; those are checked again
whenever the file is found in the cache ($DEZERO_TRUST_CACHE=1 skips that, for
hand-made stand-ins). A silent network gives up after TIMEOUT_S per file.

    path = get_file('https://example.org/data/train.gz', sha256='...')
"""
import hashlib
import http.client
import os
import sys
import time
import urllib.error
import urllib.request
from typing import NamedTuple

from dezero.files import atomic_file

# =============================================================================
# Cache directory: cache_dir, get_cache_dir
# =============================================================================
CACHE_DIR_ENV = 'DEZERO_CACHE_DIR'
# Set to 1 to use files in the cache as they are, known or not (hand-made
# stand-ins for MNIST in tests and classes).
TRUST_CACHE_ENV = 'DEZERO_TRUST_CACHE'

# The book's `dezero.utils.cache_dir`. Assigning a new path to it is honoured,
# but the environment variable, read at each call, wins over it.
cache_dir = os.environ.get(CACHE_DIR_ENV) or os.path.join(os.path.expanduser('~'), '.dezero')


def get_cache_dir():
    """The directory where downloads are kept: $DEZERO_CACHE_DIR, else `cache_dir`.

    >>> isinstance(get_cache_dir(), str)
    True
    """
    return os.path.expanduser(os.environ.get(CACHE_DIR_ENV) or cache_dir)


def make_cache_dir(directory):
    """Create the cache `directory` (and its parents) if needed; a file in the way
    is named, rather than os.makedirs' bare FileExistsError or NotADirectoryError."""
    try:
        os.makedirs(directory, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise NotADirectoryError(
            f"the cache directory {directory} cannot be made: it, or a folder above it, "
            f"is a file. Set ${CACHE_DIR_ENV} (or dezero.downloads.cache_dir) to a "
            f"directory, or move that file away") from None


# =============================================================================
# Errors: DownloadError
# =============================================================================
class DownloadError(OSError, RuntimeError):
    """A file could not be downloaded, or arrived with the wrong checksum.

    url, path and reason tell what was fetched, where it belongs and why it failed.
    """

    def __init__(self, message, *, url=None, path=None, reason=None):
        super().__init__(message)
        self.url, self.path, self.reason = url, path, reason


class _Discarded(DownloadError):
    """A download that arrived but was not the file: cut short, or a wrong checksum."""


# =============================================================================
# Progress display: tqdm when installed, one plain line otherwise
# =============================================================================
class _PlainProgress:
    """Rewrites one stderr line: 'Downloading NAME: 42.0% (1.2/2.9 MB)'."""

    def __init__(self, total, desc):
        self.total, self.desc, self.done = total, desc, 0

    def update(self, n):
        self.done += n
        mb = self.done / 2**20
        if self.total:
            text = f'{100.0 * self.done / self.total:5.1f}% ({mb:.1f}/{self.total / 2**20:.1f} MB)'
        else:
            text = f'{mb:.1f} MB'
        sys.stderr.write(f'\r{self.desc}: {text}')
        sys.stderr.flush()

    def close(self):
        sys.stderr.write('\n')
        sys.stderr.flush()


def _progress(total, desc):
    try:
        from tqdm import tqdm
    except ImportError:
        return _PlainProgress(total, desc)
    return tqdm(total=total, desc=desc, unit='B', unit_scale=True, unit_divisor=1024)


# =============================================================================
# Files whose content is fixed: KNOWN_FILES
# =============================================================================
class Digest(NamedTuple):
    """What a fixed file must be: its sha256 (hex) and, where known, its size in bytes."""
    sha256: str
    size: int | None = None


# By URL (for MNIST, the first mirror's: every mirror serves the same bytes).
# Digests and sizes as published in the checksum lists of TensorFlow Datasets
# (MNIST, tiny Shakespeare) and torchvision (CIFAR). Fixed files not listed,
# because no published digest is at hand: the VGG16 and ResNet weights and the
# ImageNet labels file; they are still checked against Content-Length, and a
# weights file against the CRC-32 its npz keeps of every array, when it is read.
KNOWN_FILES = {
    'https://ossci-datasets.s3.amazonaws.com/mnist/train-images-idx3-ubyte.gz': Digest(
        '440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609', 9912422),
    'https://ossci-datasets.s3.amazonaws.com/mnist/train-labels-idx1-ubyte.gz': Digest(
        '3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c', 28881),
    'https://ossci-datasets.s3.amazonaws.com/mnist/t10k-images-idx3-ubyte.gz': Digest(
        '8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6', 1648877),
    'https://ossci-datasets.s3.amazonaws.com/mnist/t10k-labels-idx1-ubyte.gz': Digest(
        'f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6', 4542),
    'https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz': Digest(
        '6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce'),
    'https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz': Digest(
        '85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7'),
    'https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/'
    'input.txt': Digest('86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed',
                        1115394),
}


# =============================================================================
# Download: get_file
# =============================================================================
_CHUNK = 1 << 16
# Seconds one file's download may wait on a silent network, over all its
# mirrors together: connecting, and each read, waits at most what is left;
# connecting and a read that ends without data use it up. So a dead network
# fails within TIMEOUT_S however many mirrors there are, while a slow one that
# keeps sending is not cut off.
TIMEOUT_S = 30.0


def get_file(url, file_name=None, *, sha256=None, md5=None, mirrors=(), timeout=None):
    """Return the local path of `url`'s file, downloading it into the cache if needed.

    file_name: name in the cache directory (default: the last part of the URL).
    sha256, md5: expected hex digests (KNOWN_FILES gives them for dezero's own
    files); a download that does not match is discarded, a cached file that
    does not match is an error that says to delete it.
    mirrors: more URLs of the same file, tried in order when one fails.
    timeout: seconds of network silence allowed in all (default TIMEOUT_S).
    """
    if file_name is None:
        file_name = url[url.rfind('/') + 1:]
    directory = get_cache_dir()
    file_path = os.path.join(directory, file_name)
    known = KNOWN_FILES.get(url)
    expected = {name: value.lower() for name, value in
                (('sha256', sha256 or (known and known.sha256)), ('md5', md5)) if value}
    size = known.size if known else None
    if os.path.exists(file_path):
        if not os.environ.get(TRUST_CACHE_ENV):
            _check_cached(file_path, size, expected)
        return file_path

    make_cache_dir(directory)
    budget = _Budget(TIMEOUT_S if timeout is None else timeout)
    failures = []
    for source in (url, *mirrors):
        if budget.left <= 0:
            failures.append(DownloadError(f'{source} not tried', url=source, reason=(
                'not tried: the network stayed silent for all the time allowed')))
            continue
        try:
            # Written to a temporary file in the same directory, then renamed:
            # an interrupted download never leaves a file under the real name.
            with atomic_file(file_path) as f:
                received, digests = _fetch(source, file_name, f, expected, budget)
                _check_download(source, file_name, received, size, digests, expected)
            return file_path
        except DownloadError as e:
            failures.append(e)
    if len(failures) == 1 and isinstance(failures[0], _Discarded):
        raise failures[0]  # its message says what was wrong with the download
    if len(failures) == 1:
        what = f'could not download {file_name} from {url} ({failures[0].reason}).'
    else:
        what = f'could not download {file_name} from any mirror:\n' + '\n'.join(
            f'  {e.url}: {e.reason}' for e in failures)
    raise DownloadError(
        f'{what}\n'
        f'Without a network, download it elsewhere and place it by hand at\n'
        f'  {file_path}\n'
        f'(the cache directory is set by ${CACHE_DIR_ENV}).',
        url=url, path=file_path, reason=failures[-1].reason)


class _Budget:
    """The seconds of silence one file's download may still wait."""

    def __init__(self, seconds):
        self.left = seconds

    def spend(self, seconds):
        self.left -= seconds


def _fetch(url, file_name, f, expected, budget):
    """Stream `url` into the open file `f`; return (bytes received, {name: hex digest})."""
    hashers = {name: hashlib.new(name) for name in expected}
    received = 0
    start = time.monotonic()
    try:
        # The socket waits at most what is left, on connecting and on each read.
        response = urllib.request.urlopen(url, timeout=budget.left)
        budget.spend(time.monotonic() - start)
        with response:
            total = int(response.headers.get('Content-Length') or 0)
            bar = _progress(total, f'Downloading {file_name}')
            try:
                while True:
                    start = time.monotonic()
                    chunk = response.read(_CHUNK)
                    if not chunk:
                        break
                    f.write(chunk)
                    received += len(chunk)
                    for hasher in hashers.values():
                        hasher.update(chunk)
                    bar.update(len(chunk))
            finally:
                bar.close()
    except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
        budget.spend(time.monotonic() - start)
        # A bare URLError prints as '<urlopen error ...>'; its reason reads better.
        reason = e.reason if type(e) is urllib.error.URLError else e
        raise DownloadError(f'could not download {file_name} from {url} ({reason})',
                            url=url, reason=str(reason)) from e
    if total and received != total:
        raise _Discarded(
            f'{file_name}: the download from {url} ended after {received} of the {total} '
            f'bytes announced (Content-Length); it was discarded. Retry later.',
            url=url, reason=f'cut short after {received} of {total} bytes')
    return received, {name: hasher.hexdigest() for name, hasher in hashers.items()}


def _check_download(url, file_name, received, size, digests, expected):
    problem = _mismatch(received, size, digests, expected)
    if problem:
        raise _Discarded(
            f'{file_name}: {problem} for the download from {url}\n'
            f'The download was discarded. Retry, or place a good copy by hand.',
            url=url, reason=problem.split('\n')[0])


def _check_cached(path, size, expected):
    """A cached file of known content must still be that content (a download cut
    short by an older version, or a wrong file placed by hand, is not)."""
    if size is None and not expected:
        return
    actual = os.path.getsize(path)
    digests = {}
    if size is None or actual == size:  # a wrong size says enough: skip hashing
        hashers = {name: hashlib.new(name) for name in expected}
        with open(path, 'rb') as f:
            while chunk := f.read(1 << 20):
                for hasher in hashers.values():
                    hasher.update(chunk)
        digests = {name: hasher.hexdigest() for name, hasher in hashers.items()}
    problem = _mismatch(actual, size, digests, expected)
    if problem:
        raise DownloadError(
            f'the cached file {path} is not the expected one: {problem}\n'
            f'Delete it to download it again:\n  rm {path!r}\n'
            f'(or set ${TRUST_CACHE_ENV}=1 to use the files in the cache unchecked)',
            path=path, reason=problem.split('\n')[0])


def _mismatch(actual_size, size, digests, expected):
    """What is wrong with a file of actual_size bytes and these digests, or ''."""
    if size is not None and actual_size != size:
        return f'size {actual_size} bytes, expected {size}'
    for name, want in expected.items():
        if digests.get(name) != want:
            return f'{name} checksum mismatch\n  expected {want}\n  got      {digests.get(name)}'
    return ''
