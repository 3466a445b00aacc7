"""Drawing the dynamic graph: DOT text, rendering by extension, a clear error
when Graphviz is missing."""
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest

import dezero
import dezero.functions as F
from dezero import Variable, utils


def _small_graph():
    x = Variable(np.ones((2, 3)), name="x")
    W = Variable(np.ones((3, 4)), name="W")
    y = F.tanh(F.matmul(x, W))
    y.name = "y"
    return y


needs_dot = pytest.mark.skipif(utils.find_dot() is None, reason="no Graphviz dot installed")


def test_dot_text_has_labels_shapes_and_edges():
    text = utils.get_dot_graph(_small_graph())
    lines = text.splitlines()
    assert lines[0] == "digraph g {" and lines[-1] == "}"
    assert 'v0 [label="y: (2, 4) float64", color=orange, style=filled]' in lines
    assert any('label="x: (2, 3) float64"' in line for line in lines)
    assert any('label="W: (3, 4) float64"' in line for line in lines)
    assert 'f1 [label="Tanh", color=lightblue, style=filled, shape=box]' in lines
    assert any('label="MatMul"' in line and "shape=box" in line for line in lines)
    edges = [line for line in lines if "->" in line]
    assert "f1 -> v0" in edges and "v2 -> f1" in edges
    assert len(edges) == 5  # x, W -> MatMul -> tmp -> Tanh -> y


def test_dot_text_without_verbose_shows_only_names():
    text = utils.get_dot_graph(_small_graph(), verbose=False)
    assert 'label="y"' in text and "float64" not in text


def test_dot_text_is_deterministic():
    assert utils.get_dot_graph(_small_graph()) == utils.get_dot_graph(_small_graph())


def test_dot_labels_escape_quotes():
    x = Variable(np.ones(2), name='say "hi"')
    text = utils.get_dot_graph(F.sin(x), verbose=False)
    assert 'label="say \\"hi\\""' in text


WINDOWS_PATH = "C:\\new\\table"  # unescaped, dot reads \n as a line break


def test_dot_labels_escape_backslashes():
    x = Variable(np.ones(2), name=WINDOWS_PATH)
    text = utils.get_dot_graph(F.sin(x), verbose=False)
    assert 'label="C:\\\\new\\\\table"' in text
    assert utils.escape_dot('a\\"b') == 'a\\\\\\"b'


def test_static_graph_dot_escapes_backslashes():
    graph = dezero.trace(lambda x: F.exp(x)).lower(np.ones(2, np.float32))
    graph.name = WINDOWS_PATH
    assert graph.to_dot().startswith('digraph "C:\\\\new\\\\table" {')


@needs_dot
def test_names_with_backslashes_render_as_written(tmp_path):
    x = Variable(np.ones(2), name=WINDOWS_PATH)
    path = tmp_path / "graph.svg"
    utils.plot_dot_graph(F.sin(x), verbose=False, to_file=str(path))
    assert WINDOWS_PATH in path.read_text()


def test_dot_extension_writes_text_without_graphviz(tmp_path, monkeypatch):
    monkeypatch.setattr(utils, "find_dot", lambda: None)
    path = tmp_path / "g.dot"
    utils.plot_dot_graph(_small_graph(), to_file=str(path))
    assert path.read_text().startswith("digraph g {")


@needs_dot
def test_png_is_rendered(tmp_path):
    path = tmp_path / "sub" / "graph.png"
    shown = utils.plot_dot_graph(_small_graph(), verbose=False, to_file=str(path))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert shown._repr_png_() == data and shown._repr_svg_() is None


@needs_dot
def test_format_comes_from_the_extension(tmp_path):
    path = tmp_path / "graph.svg"
    shown = utils.plot_dot_graph(_small_graph(), to_file=str(path))
    text = path.read_text()
    assert "<svg" in text and "MatMul" in text
    assert shown._repr_svg_() == text


@needs_dot
def test_graph_of_a_higher_order_derivative_draws(tmp_path):
    x = Variable(np.array(1.0), name="x")
    y = F.sin(x) * x
    y.backward(create_graph=True)
    gx = x.grad
    gx.name = "gx"
    text = utils.get_dot_graph(gx)
    assert "Cos" in text and "Mul" in text
    path = tmp_path / "gx.png"
    utils.plot_dot_graph(gx, to_file=str(path))
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_missing_dot_names_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    monkeypatch.setattr(utils, "_interpreter_dirs", lambda: [])  # nor beside python
    assert utils.find_dot() is None
    path = tmp_path / "graph.png"
    with pytest.raises(utils.GraphvizNotFoundError, match="apt-get install graphviz") as info:
        utils.plot_dot_graph(_small_graph(), to_file=str(path))
    assert "dezero[viz]" in str(info.value)
    assert not os.path.exists(path)


# =============================================================================
# Finding the renderer off PATH, and what graphviz-pure cannot write
# =============================================================================
def _fake_command(directory, name):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def test_renderer_beside_the_interpreter_is_found_off_path(tmp_path, monkeypatch):
    # A venv's python run by its path (a Jupyter kernel) has its bin/ off PATH.
    bin_dir = tmp_path / "venv" / "bin"
    pure = _fake_command(bin_dir, "graphviz-pure")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    assert utils.find_dot() == pure


def test_system_dot_is_preferred_to_graphviz_pure(tmp_path, monkeypatch):
    dot = _fake_command(tmp_path / "system", "dot")
    _fake_command(tmp_path / "venv" / "bin", "graphviz-pure")
    monkeypatch.setenv("PATH", str(tmp_path / "system"))
    monkeypatch.setattr(utils, "_interpreter_dirs", lambda: [str(tmp_path / "venv" / "bin")])
    assert utils.find_dot() == dot


def test_pdf_through_graphviz_pure_says_it_needs_graphviz(tmp_path, monkeypatch):
    pure = _fake_command(tmp_path / "bin", "graphviz-pure")  # exits 1 if ever run
    monkeypatch.setattr(utils, "find_dot", lambda: pure)
    path = tmp_path / "graph.pdf"
    with pytest.raises(utils.GraphvizNotFoundError, match=r"as \.pdf needs Graphviz's `dot`") \
            as info:
        utils.plot_dot_graph(_small_graph(), to_file=str(path))
    assert "apt-get install graphviz" in str(info.value) and ".svg or .png" in str(info.value)
    assert not path.exists()


REAL_PURE = shutil.which("graphviz-pure") or shutil.which(
    "graphviz-pure", path=os.pathsep.join(d for d in utils._interpreter_dirs() if d))
needs_pure = pytest.mark.skipif(REAL_PURE is None, reason="graphviz-pure is not installed")


@needs_pure
@pytest.mark.parametrize("extension, magic", [("svg", b"<"), ("png", b"\x89PNG")])
def test_graphviz_pure_renders_svg_and_png(tmp_path, monkeypatch, extension, magic):
    monkeypatch.setattr(utils, "find_dot", lambda: REAL_PURE)
    path = tmp_path / f"graph.{extension}"
    utils.plot_dot_graph(_small_graph(), to_file=str(path))
    assert path.read_bytes().lstrip()[:len(magic)] == magic


@pytest.mark.skipif(shutil.which("dot") is None, reason="no system Graphviz dot")
def test_pdf_renders_with_system_graphviz(tmp_path):
    path = tmp_path / "graph.pdf"
    utils.plot_dot_graph(_small_graph(), to_file=str(path))
    assert path.read_bytes()[:5] == b"%PDF-"


@needs_pure
@pytest.mark.slow
def test_a_venv_python_run_by_its_path_renders_with_graphviz_pure(tmp_path):
    # The case of a Jupyter kernel: the venv is not activated, PATH has no renderer.
    env_dir = tmp_path / "venv"
    venv.create(env_dir, system_site_packages=True, symlinks=True, with_pip=False)
    bin_dir = Path(venv_bin(env_dir))
    os.symlink(REAL_PURE, bin_dir / os.path.basename(REAL_PURE))
    script = ("import numpy as np, dezero.functions as F; from dezero import Variable, utils; "
              "print(utils.find_dot()); "
              "utils.plot_dot_graph(F.sin(Variable(np.ones(2))), to_file='g.svg')")
    root = str(Path(__file__).resolve().parents[1])
    result = subprocess.run([str(bin_dir / "python"), "-c", script], cwd=tmp_path,
                            env=dict(os.environ, PATH=str(tmp_path / "empty"), PYTHONPATH=root),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(bin_dir / os.path.basename(REAL_PURE))
    assert (tmp_path / "g.svg").read_text().lstrip().startswith("<")


def venv_bin(env_dir):
    return os.path.join(env_dir, "Scripts" if os.name == "nt" else "bin")
