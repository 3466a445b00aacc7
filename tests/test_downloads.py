"""get_file: cache hits, atomic writes, checksums, progress and the offline error.

The network is never used: urllib.request.urlopen is replaced by fakes, or
answered by a local server on 127.0.0.1.
"""
import hashlib
import http.server
import io
import os
import sys
import threading
import time
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


# =============================================================================
# Complete files only: Content-Length, known digests, bad cached files
# =============================================================================
class ShortResponse(FakeResponse):
    """The connection closes cleanly before the announced Content-Length."""

    def __init__(self, payload, announced):
        super().__init__(payload)
        self.headers = {'Content-Length': str(announced)}


def test_a_download_cut_short_is_not_cached(cache, serve):
    serve(lambda: ShortResponse(PAYLOAD[:100_000], announced=len(PAYLOAD)))
    with pytest.raises(DownloadError, match=f'ended after 100000 of the {len(PAYLOAD)} bytes'):
        get_file(URL)
    assert os.listdir(cache) == []


def test_known_files_are_checked_by_size_and_sha256(cache, serve, monkeypatch):
    serve(lambda: FakeResponse(PAYLOAD))
    digest = downloads.Digest(hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD))
    monkeypatch.setitem(downloads.KNOWN_FILES, URL, digest)
    assert open(get_file(URL), 'rb').read() == PAYLOAD
    os.remove(get_file(URL))
    monkeypatch.setitem(downloads.KNOWN_FILES, URL, digest._replace(sha256='0' * 64))
    with pytest.raises(DownloadError, match='sha256 checksum mismatch'):
        get_file(URL)
    monkeypatch.setitem(downloads.KNOWN_FILES, URL, digest._replace(size=len(PAYLOAD) + 1))
    with pytest.raises(DownloadError, match=f'size {len(PAYLOAD)} bytes, expected'):
        get_file(URL)
    assert os.listdir(cache) == []


@pytest.mark.parametrize('content', [PAYLOAD[:1000], PAYLOAD[:-1] + b'x'],
                         ids=['truncated', 'altered'])
def test_a_bad_cached_file_of_known_content_says_which_file_to_delete(
        cache, serve, monkeypatch, content):
    asked = serve(lambda: FakeResponse(PAYLOAD))
    monkeypatch.setitem(downloads.KNOWN_FILES, URL, downloads.Digest(
        hashlib.sha256(PAYLOAD).hexdigest(), len(PAYLOAD)))
    cache.mkdir()
    (cache / 'data.bin').write_bytes(content)   # e.g. cut short by an older version
    with pytest.raises(DownloadError) as info:
        get_file(URL)
    message = str(info.value)
    assert f"rm '{cache / 'data.bin'}'" in message and 'Delete it' in message
    assert info.value.path == str(cache / 'data.bin')
    assert asked == []
    # Trusted on request: hand-made stand-ins in the cache.
    monkeypatch.setenv('DEZERO_TRUST_CACHE', '1')
    assert get_file(URL) == str(cache / 'data.bin')


def test_every_fixed_dataset_file_has_a_known_digest():
    from dezero.datasets import CIFAR10, CIFAR100, MNIST, Shakespear
    urls = [MNIST.mirrors[0] + name for names in MNIST.files.values() for name in names]
    urls += [CIFAR10.url, CIFAR100.url, Shakespear.url]
    for url in urls:
        digest = downloads.KNOWN_FILES[url]
        assert len(digest.sha256) == 64 and int(digest.sha256, 16) >= 0


def test_mnist_tries_every_mirror_and_keeps_no_file_with_a_wrong_digest(cache, serve):
    from dezero.datasets import MNIST
    asked = serve(lambda: FakeResponse(b'not the MNIST file'))
    with pytest.raises(DownloadError) as info:
        MNIST(train=True)
    message = str(info.value)
    assert message.count('size 18 bytes, expected 9912422') == len(MNIST.mirrors)
    assert asked == [m + 'train-images-idx3-ubyte.gz' for m in MNIST.mirrors]
    assert os.listdir(cache) == []


# =============================================================================
# A silent network: one time budget per file, over all its mirrors
# =============================================================================
class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.routes[self.path](self)

    def log_message(self, *args):
        pass


@pytest.fixture
def local_server(monkeypatch):
    """An HTTP server on 127.0.0.1 answering each path with a scripted handler;
    returns (base URL, routes dict, event that ends every stall)."""
    for name in ('no_proxy', 'NO_PROXY'):
        monkeypatch.setenv(name, '127.0.0.1')
    server = Server(('127.0.0.1', 0), Handler)
    server.routes, release = {}, threading.Event()
    # shutdown() waits for the serving loop's next poll: poll often.
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield f'http://127.0.0.1:{server.server_address[1]}', server.routes, release
    release.set()
    server.shutdown()
    server.server_close()


def headers(handler, length):
    handler.send_response(200)
    handler.send_header('Content-Length', str(length))
    handler.end_headers()


def test_a_silent_network_gives_up_within_one_budget_for_all_mirrors(
        cache, local_server, monkeypatch):
    from dezero.datasets import MNIST
    base, routes, release = local_server
    mirrors = (base + '/a/', base + '/b/')
    for mirror in mirrors:   # both accept the connection and never answer
        routes[mirror[len(base):] + 'train-images-idx3-ubyte.gz'] = lambda h: release.wait(10)
    monkeypatch.setattr(MNIST, 'mirrors', mirrors)
    monkeypatch.setattr(downloads, 'TIMEOUT_S', 0.4)
    start = time.monotonic()
    with pytest.raises(DownloadError, match='from any mirror'):
        MNIST(train=True)
    assert time.monotonic() - start < 0.72   # not 0.4 s per mirror
    assert os.listdir(cache) == []


def test_a_stall_in_the_middle_of_the_body_gives_up(cache, local_server):
    base, routes, release = local_server

    def half_then_silence(handler):
        headers(handler, len(PAYLOAD))
        handler.wfile.write(PAYLOAD[:1000])
        handler.wfile.flush()
        release.wait(10)

    routes['/data.bin'] = half_then_silence
    start = time.monotonic()
    with pytest.raises(DownloadError, match='timed out'):
        get_file(base + '/data.bin', timeout=0.25)
    assert time.monotonic() - start < 0.75
    assert os.listdir(cache) == []


def test_time_while_data_flows_does_not_count(cache, local_server):
    base, routes, _ = local_server
    parts = [PAYLOAD[i:i + 32_000] for i in range(0, len(PAYLOAD), 32_000)]

    def slow_but_steady(handler):
        headers(handler, len(PAYLOAD))
        for part in parts:
            handler.wfile.write(part)
            handler.wfile.flush()
            time.sleep(0.06)

    routes['/data.bin'] = slow_but_steady
    start = time.monotonic()
    path = get_file(base + '/data.bin', timeout=0.25)
    assert time.monotonic() - start > 0.25   # longer than the budget in all
    assert open(path, 'rb').read() == PAYLOAD


@pytest.mark.parametrize('below', ['', 'sub'], ids=['the file', 'a folder under it'])
def test_a_cache_directory_that_is_a_file_is_named_with_the_fix(cache, offline, below,
                                                                monkeypatch):
    # os.makedirs raised a bare FileExistsError (or NotADirectoryError).
    from dezero.datasets import save_cache_npz
    cache.parent.mkdir(exist_ok=True)
    cache.write_text('a file where the cache directory should be')
    target = cache / below if below else cache
    monkeypatch.setenv('DEZERO_CACHE_DIR', str(target))
    pattern = rf'the cache directory {target} cannot be made: .* is a file\..*DEZERO_CACHE_DIR'
    with pytest.raises(NotADirectoryError, match=pattern):
        get_file('https://example.com/data.bin')
    with pytest.raises(NotADirectoryError, match=pattern):
        save_cache_npz([1], [2], 'data.tar.gz')
