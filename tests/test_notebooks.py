"""The tutorial notebooks: stored without outputs, in step with their sources, and
each one runs top to bottom in a fresh python3 kernel.

Running them needs the `notebooks` extra (pip install -e ".[notebooks]") and a
Graphviz renderer (`dot`, or `graphviz-pure` from the `viz` extra).
"""
import ast
import importlib.util
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import notebook_pages  # noqa: E402

sys.path.remove(str(ROOT / "docs" / "hooks"))
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))

# The `notebooks` extra; the notebooks import all of these.
NEEDED = ("nbclient", "nbformat", "ipykernel", "matplotlib", "sklearn")


def _missing_modules():
    return [name for name in NEEDED if importlib.util.find_spec(name) is None]


def test_every_source_has_a_notebook_and_they_are_numbered():
    sources = sorted(p.stem for p in (NOTEBOOK_DIR / "src").glob("[0-9][0-9]_*.py"))
    assert sources == [p.stem for p in NOTEBOOKS]
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, len(NOTEBOOKS) + 1)]
    assert len(NOTEBOOKS) >= 7


def _extra(name):
    """The requirements of one extra of setup.py, a literal list there."""
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    extras = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                  and getattr(n.targets[0], "id", None) == "EXTRAS")
    value = next(v for k, v in zip(extras.keys, extras.values) if ast.literal_eval(k) == name)
    return ast.literal_eval(value)


def test_the_notebooks_extra_brings_a_way_to_open_and_to_execute_them():
    names = {re.split(r"[<>=;\[ ]", text)[0] for text in _extra("notebooks")}
    assert names & {"jupyterlab", "notebook"}, names  # `jupyter lab notebooks/`
    assert {"nbconvert", "ipykernel"} <= names  # `jupyter nbconvert --execute`


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{path.name}: a code cell has stored outputs"
            assert cell["execution_count"] is None, f"{path.name}: stored execution count"


def test_notebooks_match_their_sources():
    pytest.importorskip("nbformat")
    sys.path.insert(0, str(NOTEBOOK_DIR))
    try:
        import build
    finally:
        sys.path.remove(str(NOTEBOOK_DIR))
    stale = build.build_all(check=True)
    assert stale == [], f"rebuild with `python notebooks/build.py`: {stale}"


def test_build_parses_markdown_and_code_cells():
    pytest.importorskip("nbformat")
    sys.path.insert(0, str(NOTEBOOK_DIR))
    try:
        import build
    finally:
        sys.path.remove(str(NOTEBOOK_DIR))
    text = "# %% [markdown]\n# # Title\n#\n# text\n\n# %%\nx = 1\n\n# %%\nprint(x)\n"
    assert build.parse_cells(text) == [
        ("markdown", "# Title\n\ntext"), ("code", "x = 1"), ("code", "print(x)")]
    with pytest.raises(ValueError, match="leading '#'"):
        build.parse_cells("# %% [markdown]\nnot a comment\n")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path):
    missing = _missing_modules()
    if missing:
        pytest.skip(f"running notebooks needs the `notebooks` extra; missing: {missing}")
    from dezero.utils import find_dot
    if find_dot() is None:
        pytest.skip("running notebooks needs Graphviz `dot` or `graphviz-pure` on PATH")
    import nbformat
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel
    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        pytest.skip("no `python3` Jupyter kernel (python -m ipykernel install --user)")

    # Run by the docs build's hook, in a fresh kernel that imports this checkout's
    # dezero, in a scratch folder; a cell that raises fails it. The executed copy is
    # kept for the run (conftest: DEZERO_NOTEBOOK_CACHE), so a docs build earlier
    # in the same run with the same code and notebook has run it already.
    nb = nbformat.read(str(notebook_pages.executed(path)), as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert errors == []
    assert any(c.outputs for c in nb.cells if c.cell_type == "code")
