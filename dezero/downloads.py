"""Download files once and keep them in a cache directory.

downloads.py sits under datasets.py (and under pretrained weights in models.py):
everything that comes from the network goes through `get_file`, which returns
a local path, downloading into the cache only when the file is not there yet.
Offline, it raises a `DownloadError` that says where to place the file by hand.

    path = get_file('https://example.org/data/train.gz', md5='...')
"""
import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request

from dezero.files import atomic_file

# =============================================================================
# Cache directory: cache_dir, get_cache_dir
# =============================================================================
CACHE_DIR_ENV = 'DEZERO_CACHE_DIR'

# The book's `dezero.utils.cache_dir`. Assigning a new path to it is honoured,
# but the environment variable, read at each call, wins over it.
cache_dir = os.environ.get(CACHE_DIR_ENV) or os.path.join(os.path.expanduser('~'), '.dezero')


def get_cache_dir():
    """The directory where downloads are kept: $DEZERO_CACHE_DIR, else `cache_dir`.

    >>> isinstance(get_cache_dir(), str)
    True
    """
    return os.path.expanduser(os.environ.get(CACHE_DIR_ENV) or cache_dir)


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
# Download: get_file
# =============================================================================
_CHUNK = 1 << 16
_TIMEOUT_S = 30


def get_file(url, file_name=None, *, sha256=None, md5=None):
    """Return the local path of `url`'s file, downloading it into the cache if needed.

    file_name: name in the cache directory (default: the last part of the URL).
    sha256, md5: expected hex digest of a fresh download; a mismatch discards it.
    A file already in the cache is trusted as it is (delete it to download anew).
    """
    if file_name is None:
        file_name = url[url.rfind('/') + 1:]
    directory = get_cache_dir()
    file_path = os.path.join(directory, file_name)
    if os.path.exists(file_path):
        return file_path

    os.makedirs(directory, exist_ok=True)
    expected = {name: value.lower() for name, value in (('sha256', sha256), ('md5', md5)) if value}
    hashers = {name: hashlib.new(name) for name in expected}
    # Write to a temporary file in the same directory, then rename: an
    # interrupted download never leaves a partial file under the real name.
    with atomic_file(file_path) as f:
        _fetch(url, file_name, f, hashers)
        for name, hasher in hashers.items():
            got = hasher.hexdigest()
            if got != expected[name]:
                raise DownloadError(
                    f'{file_name}: {name} checksum mismatch for the download from {url}\n'
                    f'  expected {expected[name]}\n  got      {got}\n'
                    f'The download was discarded. Retry, or place a good copy by hand '
                    f'at {file_path}',
                    url=url, path=file_path, reason=f'{name} checksum mismatch')
    return file_path


def _fetch(url, file_name, f, hashers):
    """Stream `url` into the open file `f`, feeding every hasher on the way."""
    file_path = os.path.join(get_cache_dir(), file_name)
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
            total = int(response.headers.get('Content-Length') or 0)
            bar = _progress(total, f'Downloading {file_name}')
            try:
                while chunk := response.read(_CHUNK):
                    f.write(chunk)
                    for hasher in hashers.values():
                        hasher.update(chunk)
                    bar.update(len(chunk))
            finally:
                bar.close()
    except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
        # A bare URLError prints as '<urlopen error ...>'; its reason reads better.
        reason = e.reason if type(e) is urllib.error.URLError else e
        raise DownloadError(
            f'could not download {file_name} from {url} ({reason}).\n'
            f'Without a network, download it elsewhere and place it by hand at\n'
            f'  {file_path}\n'
            f'(the cache directory is set by ${CACHE_DIR_ENV}).',
            url=url, path=file_path, reason=str(reason)) from e
