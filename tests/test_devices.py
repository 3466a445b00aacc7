"""Where dezero finds no GPU: importing never fails, and each call that needs one says
which call, what is missing and what to do; DEZERO_BACKEND names itself and its values.

(tests/gpu checks the moves between devices, under cupy or its test double.)
"""
import importlib.abc
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import dezero
from dezero import cuda
from dezero.models import MLP
from dezero.static import backends


class _RaisingImport(importlib.abc.MetaPathFinder):
    """`import cupy` raising what cupy's import raises in a home it cannot write."""

    def __init__(self, error):
        self.error = error

    def find_spec(self, name, path, target=None):
        if name == "cupy":
            raise self.error


@pytest.mark.parametrize("error", [
    PermissionError(13, "Permission denied", "/home/user/.cupy"),
    NotADirectoryError(20, "Not a directory", "/home/user/.cupy")])
def test_a_cupy_that_fails_to_import_leaves_dezero_on_numpy(monkeypatch, error):
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_RaisingImport(error), *sys.meta_path])
    module, why = cuda._find_gpu()
    assert module is None
    assert why.startswith(f"CuPy is installed but cannot be imported ({type(error).__name__}")


@pytest.mark.slow  # a subprocess importing cupy
def test_import_dezero_with_a_home_that_cannot_be_written(tmp_path):
    pytest.importorskip("cupy")
    blocker = tmp_path / "file"
    blocker.write_text("")  # HOME under a file: cupy's makedirs(~/.cupy) fails
    env = {**os.environ, "HOME": str(blocker / "home"),
           "PYTHONPATH": os.path.dirname(os.path.dirname(dezero.__file__))}
    done = subprocess.run([sys.executable, "-c", "import dezero, numpy as np; "
                           "print(dezero.cuda.gpu_enable, dezero.Variable(np.ones(2)) * 2)"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("False variable([2. 2.])")


def _no_driver_cupy(monkeypatch):
    def count():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is "
                           "insufficient for CUDA runtime version")
    runtime = types.SimpleNamespace(getDeviceCount=count)
    monkeypatch.setitem(sys.modules, "cupy",
                        types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime)))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_no_driver_at_all_is_not_called_an_insufficient_one(monkeypatch):
    _no_driver_cupy(monkeypatch)
    monkeypatch.setattr(cuda.os.path, "exists", lambda path: False)
    assert cuda._find_gpu()[1].startswith("CuPy is installed but this machine has no "
                                          "NVIDIA driver (cudaErrorInsufficientDriver")
    monkeypatch.setattr(cuda.os.path, "exists", lambda path: True)  # an old driver
    assert cuda._find_gpu()[1].startswith("CuPy is installed but finds no usable GPU "
                                          "(cudaErrorInsufficientDriver")


@pytest.mark.skipif(cuda.gpu_enable, reason="cupy finds a GPU")
def test_to_gpu_without_a_gpu_names_the_call_and_the_way_out():
    model = MLP((3, 2))
    model(np.ones((1, 4), np.float32))
    with pytest.raises(RuntimeError, match=r"^MLP.to_gpu\(\) needs a GPU, and dezero has "
                       r"none: CuPy is .*\n  fix: run where cupy finds a GPU, or stay on"):
        model.to_gpu()
    assert all(isinstance(p.data, np.ndarray) for p in model.params())  # nothing moved
    with pytest.raises(RuntimeError, match=r"dezero.cuda.as_cupy\(\) needs a GPU"):
        cuda.as_cupy(np.ones(2))


@pytest.mark.parametrize("value", ["gpu", "cupy", "fast"])
def test_an_unusable_dezero_backend_names_the_variable_and_its_values(monkeypatch, value):
    monkeypatch.setattr(backends, "DEFAULT", value)
    with pytest.raises(ValueError, match=rf"^DEZERO_BACKEND='{value}' cannot replay graph "
                       r"<lambda>, which is on the CPU: it takes interpreter, python or cpu"
                       r" .*\n  fix: unset DEZERO_BACKEND"):
        dezero.trace(lambda x: x * 2 + 1)(np.ones(3, np.float32))


def test_no_extra_installs_cupys_source_package(monkeypatch):
    # `cupy` on PyPI is the source package: it builds itself and needs the CUDA toolkit.
    import runpy

    import setuptools
    root = os.path.dirname(os.path.dirname(dezero.__file__))
    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.chdir(root)
    runpy.run_path(os.path.join(root, "setup.py"))
    names = {extra: [req.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip()
                     for req in reqs] for extra, reqs in captured["extras_require"].items()}
    assert names["gpu"] == ["cupy-cuda12x"]
    assert [extra for extra, packages in names.items() if "cupy" in packages] == []


@pytest.mark.slow  # runs a shell script that starts python
@pytest.mark.skipif(cuda.gpu_enable, reason="a GPU is here: the check would run")
def test_the_device_check_says_there_is_no_gpu_and_exits_0(tmp_path):
    import json
    root = os.path.dirname(os.path.dirname(dezero.__file__))
    done = subprocess.run(["bash", os.path.join(root, "benchmarks", "gpu_check.sh"),
                           str(tmp_path / "report")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"gpu_check: no GPU here ({cuda.no_gpu_reason})")
    assert json.loads((tmp_path / "report" / "gpu_check.json").read_text()) == {
        "gpu": False, "reason": cuda.no_gpu_reason, "parts": []}
    assert "No GPU: " in (tmp_path / "report" / "gpu_check.md").read_text()
