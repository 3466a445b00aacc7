"""get_file: cache hits, atomic writes, checksums, progress and the offline error.

The network is never used: urllib.request.urlopen is replaced by fakes.
"""
import hashlib
import io
import os
import sys
import urllib.error
import urllib.request

import pytest

from dezero import downloads
from dezero.downloads import DownloadError, get_cache_dir, get_file

PAYLOAD = bytes(range(256)) * 1000   # 256 kB: several read chunks
URL = 'https://example.org/files/data.bin'


class FakeResponse:
    """Stands in for urlopen's response; optionally fails after `fail_after` bytes."""

    def __init__(self, payload, fail_after=None, error=ConnectionResetError('peer reset')):
        self.stream = io.BytesIO(payload)
        self.headers = {'Content-Length': str(len(payload))}
        self.fail_after, self.error = fail_after, error

    def read(self, n):
        if self.fail_after is not None and self.stream.tell() >= self.fail_after:
            raise self.error
        return self.stream.read(n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv('DEZERO_CACHE_DIR', str(tmp_path / 'cache'))
    return tmp_path / 'cache'


@pytest.fixture
def serve(monkeypatch):
    """Make urlopen answer with the given FakeResponse factory; returns the list of URLs asked."""
    asked = []

    def install(make_response):
        def fake_urlopen(url, timeout=None):
            asked.append(url)
            return make_response()
        monkeypatch.setattr(urllib.request, 'urlopen', fake_urlopen)
        return asked
    return install


@pytest.fixture
def offline(monkeypatch):
    def fake_urlopen(url, timeout=None):
        raise urllib.error.URLError(OSError(101, 'Network is unreachable'))
    monkeypatch.setattr(urllib.request, 'urlopen', fake_urlopen)


def test_cache_dir_follows_the_environment_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv('DEZERO_CACHE_DIR', str(tmp_path / 'a'))
    assert get_cache_dir() == str(tmp_path / 'a')
    monkeypatch.setenv('DEZERO_CACHE_DIR', str(tmp_path / 'b'))
    assert get_cache_dir() == str(tmp_path / 'b')
    monkeypatch.delenv('DEZERO_CACHE_DIR')
    monkeypatch.setattr(downloads, 'cache_dir', str(tmp_path / 'c'))
    assert get_cache_dir() == str(tmp_path / 'c')


def test_download_then_cache_hit(cache, serve):
    asked = serve(lambda: FakeResponse(PAYLOAD))
    path = get_file(URL)
    assert path == os.path.join(str(cache), 'data.bin')
    assert open(path, 'rb').read() == PAYLOAD
    assert get_file(URL) == path
    assert asked == [URL]            # the second call did not touch the network
    assert os.listdir(cache) == ['data.bin']


def test_file_name_overrides_the_url_name(cache, serve):
    serve(lambda: FakeResponse(PAYLOAD))
    path = get_file(URL, 'other.bin')
    assert os.path.basename(path) == 'other.bin'
    assert os.listdir(cache) == ['other.bin']


def test_matching_checksums_are_accepted(cache, serve):
    serve(lambda: FakeResponse(PAYLOAD))
    path = get_file(URL, sha256=hashlib.sha256(PAYLOAD).hexdigest(),
                    md5=hashlib.md5(PAYLOAD).hexdigest().upper())
    assert open(path, 'rb').read() == PAYLOAD


@pytest.mark.parametrize('kind', ['sha256', 'md5'])
def test_checksum_mismatch_discards_the_download(cache, serve, kind):
    serve(lambda: FakeResponse(PAYLOAD))
    with pytest.raises(DownloadError) as info:
        get_file(URL, **{kind: '0' * 64})
    message = str(info.value)
    assert f'{kind} checksum mismatch' in message
    assert hashlib.new(kind, PAYLOAD).hexdigest() in message
    assert os.listdir(cache) == []   # neither the file nor a partial one is left


def test_interrupted_download_leaves_nothing_behind(cache, serve):
    serve(lambda: FakeResponse(PAYLOAD, fail_after=100_000))
    with pytest.raises(DownloadError, match='peer reset'):
        get_file(URL)
    assert os.listdir(cache) == []


def test_keyboard_interrupt_leaves_nothing_behind(cache, serve):
    serve(lambda: FakeResponse(PAYLOAD, fail_after=100_000, error=KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        get_file(URL)
    assert os.listdir(cache) == []


def test_offline_error_names_file_url_and_path(cache, offline):
    with pytest.raises(DownloadError) as info:
        get_file(URL)
    error, message = info.value, str(info.value)
    assert isinstance(error, OSError) and isinstance(error, RuntimeError)
    assert 'data.bin' in message and URL in message
    assert os.path.join(str(cache), 'data.bin') in message
    assert 'Network is unreachable' in message
    assert error.url == URL and error.path == os.path.join(str(cache), 'data.bin')
    assert os.listdir(cache) == []


def test_http_error_is_reported_with_its_status(cache, monkeypatch):
    def fake_urlopen(url, timeout=None):
        raise urllib.error.HTTPError(url, 404, 'Not Found', {}, None)
    monkeypatch.setattr(urllib.request, 'urlopen', fake_urlopen)
    with pytest.raises(DownloadError, match='404'):
        get_file(URL)


def test_plain_progress_line_without_tqdm(cache, serve, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, 'tqdm', None)    # makes `import tqdm` fail
    serve(lambda: FakeResponse(PAYLOAD))
    get_file(URL)
    err = capsys.readouterr().err
    assert 'Downloading data.bin' in err
    assert '100.0%' in err


def test_tqdm_progress_when_installed(cache, serve, capsys):
    pytest.importorskip('tqdm')
    serve(lambda: FakeResponse(PAYLOAD))
    get_file(URL)
    err = capsys.readouterr().err
    assert 'Downloading data.bin' in err and '100%' in err
