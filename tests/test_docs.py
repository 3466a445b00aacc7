"""The documentation site builds with `mkdocs build --strict` (no broken link, no
missing page, no module the API reference cannot find), its generated indexes
list the steps and notebooks that exist, every page that explains a graph shows a
picture of it that is legible at the page's width, and every notebook is a page
with its outputs.

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


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once with `mkdocs build --strict` (which also executes the
    notebooks, docs/hooks/notebook_pages.py)."""
    missing = [name for name in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers",
                                 "mkdocs_jupyter", "nbclient", "ipykernel")
               if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"building the docs needs the `docs` extra; missing: {missing}")
    from dezero.utils import find_dot
    if find_dot() is None:
        pytest.skip("the notebooks in the docs need Graphviz `dot` or `graphviz-pure`")
    site = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
         "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return site


def test_docs_build_strict(site):
    assert "Variable" in (site / "api" / "core" / "index.html").read_text(encoding="utf-8")
    steps_page = (site / "steps" / "index.html").read_text(encoding="utf-8")
    has_steps = (ROOT / "steps" / "step01.py").exists()
    assert ("<td><code>steps/step01.py</code>" in steps_page) == has_steps


# The pages that explain a graph, each of which must show one.
PAGES_WITH_GRAPHS = ["index.md", "concepts/define-by-run.md", "concepts/trace-mode.md",
                     "define-and-run/index.md", "define-and-run/kernels.md"]
# A picture wider than this is scaled down by the page's column (about 800 px) until
# its 14 pt labels can no longer be read; a large graph is linked, not shown.
LEGIBLE_WIDTH_PT = 600


def _page_html(site, page):
    path = page[:-3]
    folder = site if path == "index" else site / path.removesuffix("/index")
    return folder / "index.html"


@pytest.mark.parametrize("page", PAGES_WITH_GRAPHS)
def test_pages_that_explain_a_graph_show_a_legible_picture_of_it(site, page):
    html = _page_html(site, page)
    sources = re.findall(r'<img [^>]*src="([^"]+\.svg)"', html.read_text(encoding="utf-8"))
    assert sources, f"{page} shows no picture"
    for source in sources:
        picture = (html.parent / source).resolve()
        assert picture.is_file(), f"{page}: {source} is not in the site"
        head = picture.read_text(encoding="utf-8")[:2000]
        width = float(re.search(r'<svg width="([0-9.]+)pt"', head).group(1))
        assert width <= LEGIBLE_WIDTH_PT, f"{page}: {source} is {width} pt wide"


NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
DRAWS = re.compile(r"plot_dot_graph|\.plot\(|plt\.show|display\(")


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_pages_show_the_executed_notebook(site, notebook):
    page = site / "notebooks" / notebook.stem / "index.html"
    assert page.is_file(), f"no page for {notebook.name}"
    html = page.read_text(encoding="utf-8")
    outputs = re.findall(r'class="jp-Rendered(\w+) jp-OutputArea-output', html)
    assert outputs, f"{notebook.name}: the page shows no output"
    if DRAWS.search(notebook.read_text(encoding="utf-8")):
        assert {"Image", "SVG"} & set(outputs), f"{notebook.name}: no picture on its page"


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
    assert "MLP  (63 parameters)" in out and "resume after epoch 19 with lr" in out
    assert namespace["train_step"].entries == 1  # the schedule's rates replay: no retrace


def test_transformers_examples_run_in_order(tmp_path, monkeypatch, capsys):
    blocks = python_blocks("transformers.md")
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, "transformers.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "attention: (2, 4, 8, 16)" in out
    loss = float(re.search(r"loss after 50 steps: ([0-9.]+)", out).group(1))
    assert loss < 3.6  # from ln(95) = 4.55: it learns
    assert re.search(r"""\n['"]def """, out)  # the prompt and the characters sampled
    assert re.search(r"\d+ ops in \d+ kernels\nkernel k0: \d+ ops, reduces axes", out)
    assert namespace["step"].entries == 1  # the schedule's rates replay: no retrace


def test_shapes_and_symbols_examples_run_in_order(tmp_path, monkeypatch, capsys):
    text = (ROOT / "docs" / "shapes-and-symbols.md").read_text(encoding="utf-8")
    blocks = python_blocks("shapes-and-symbols.md")
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, "shapes-and-symbols.md", "exec"), namespace)
    out = capsys.readouterr().out
    shown = re.search(r"^```text\n(.*?)^```", text, re.M | re.S).group(1)
    assert out.startswith(shown)  # the page shows what its first example prints
    assert "variable(7.0)" in out and "f32[B,2] " in out
    assert float(re.search(r"loss after 200 runs: ([0-9.]+)", out).group(1)) < 0.05
    assert namespace["train_step"].entries == 2


def test_the_pictures_of_the_pages_are_those_tools_docs_pictures_draws():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import docs_pictures
    finally:
        sys.path.remove(str(ROOT / "tools"))
    drawn = dict(docs_pictures.pictures())
    stored = sorted(p.stem for p in (ROOT / "docs" / "pictures").glob("*.svg"))
    assert sorted(drawn) == stored
    for stem, dot in drawn.items():
        assert dot.startswith("digraph"), stem
        svg = (ROOT / "docs" / "pictures" / f"{stem}.svg").read_text(encoding="utf-8")
        # the same graph: every op the DOT text draws is a label in the picture
        for op in set(re.findall(r'label="(\w+)[\\"]', dot)):
            assert f">{op}<" in svg or f">{op} " in svg or f">{op}\n" in svg, (stem, op)
