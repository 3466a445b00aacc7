"""The documentation site builds with `mkdocs build --strict` (no broken link, no
missing page, no module the API reference cannot find), and its generated indexes
list the steps and notebooks that exist.

Building needs the `docs` extra: pip install -e ".[docs]".
"""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import learning_index  # noqa: E402

sys.path.remove(str(ROOT / "docs" / "hooks"))


def test_steps_index_lists_each_step_with_its_first_docstring_line(tmp_path):
    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "step02.py").write_text('"""Step 2: a Function | a box."""\n')
    (tmp_path / "steps" / "step01.py").write_text('"""Step 1: a Variable.\n\nMore."""\n')
    (tmp_path / "steps" / "pictures.py").write_text('"""Not a step."""\n')
    table = learning_index.steps_index(tmp_path).splitlines()
    assert table[2:] == ["| `steps/step01.py` | a Variable. |",
                         "| `steps/step02.py` | a Function \\| a box. |"]


def test_steps_index_says_when_there_are_no_steps(tmp_path):
    assert "no `steps/`" in learning_index.steps_index(tmp_path)


def test_notebooks_index_lists_every_notebook_source():
    table = learning_index.notebooks_index()
    sources = sorted((ROOT / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
    assert sources
    for source in sources:
        assert f"`notebooks/{source.stem}.ipynb`" in table
    assert "| Variables and Functions |" in table


def test_pages_with_markers_are_filled():
    page = (ROOT / "docs" / "steps.md").read_text(encoding="utf-8")
    filled = learning_index.on_page_markdown(page, None, None, None)
    assert "{{ steps_index }}" in page and "{{" not in filled


def test_docs_build_strict(tmp_path):
    missing = [name for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
               if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"building the docs needs the `docs` extra; missing: {missing}")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
         "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    site = tmp_path / "site"
    assert "Variable" in (site / "api" / "core" / "index.html").read_text(encoding="utf-8")
    steps_page = (site / "steps" / "index.html").read_text(encoding="utf-8")
    has_steps = (ROOT / "steps" / "step01.py").exists()
    assert ("<td><code>steps/step01.py</code>" in steps_page) == has_steps


def python_blocks(page):
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return re.findall(r"^```python\n(.*?)^```", text, re.M | re.S)


def test_getting_started_examples_run_in_order(tmp_path, monkeypatch, capsys):
    # The blocks build on each other, as a reader would type them into one session.
    from dezero.utils import find_dot
    blocks = python_blocks("getting-started.md")
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        if "plot_dot_graph" in block and find_dot() is None:
            continue
        exec(compile(block, "getting-started.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "11.5 14.25" in out and "11.75" in out
    accuracy = float(re.search(r"accuracy ([0-9.]+)", out).group(1))
    assert accuracy > 0.9
    assert "trace train_step(x: f32[30,2]" in out
