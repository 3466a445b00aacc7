"""MkDocs hook: fill the step and notebook indexes from the files themselves.

A page that contains `{{ steps_index }}` or `{{ notebooks_index }}` gets a table built
from steps/stepNN.py (first docstring line) and notebooks/src/NN_*.py (first heading),
so the lists never drift from the files. Named in mkdocs.yml under `hooks:`.

    mkdocs build --strict
"""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]

# =============================================================================
# Indexes: steps_index, notebooks_index, on_page_markdown
# =============================================================================


def steps_index(root=ROOT):
    """A markdown table of steps/stepNN.py: file and the first line of its docstring."""
    paths = sorted((root / "steps").glob("step[0-9][0-9]*.py"))
    if not paths:
        return "*This checkout has no `steps/` folder.*"
    rows = ["| Step | What it adds |", "|---|---|"]
    for path in paths:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        summary = doc.strip().splitlines()[0] if doc.strip() else "(no description)"
        # "Step 1: a Variable ..." -> "a Variable ..."; the table already names the step.
        head, sep, rest = summary.partition(":")
        if sep and head.lower().startswith("step"):
            summary = rest.strip()
        rows.append(f"| `{path.relative_to(root).as_posix()}` | {_cell(summary)} |")
    return "\n".join(rows)


def notebooks_index(root=ROOT):
    """A markdown table of notebooks/NN_*.ipynb with the title of each."""
    paths = sorted((root / "notebooks" / "src").glob("[0-9][0-9]_*.py"))
    if not paths:
        return "*This checkout has no notebooks.*"
    rows = ["| Notebook | Topic |", "|---|---|"]
    for path in paths:
        title = next((line.lstrip("# ").strip()
                      for line in path.read_text(encoding="utf-8").splitlines()
                      if line.startswith("# # ")), path.stem)
        # "01 · Variables and Functions" -> "Variables and Functions"
        title = title.partition("·")[2].strip() or title
        name = f"notebooks/{path.stem}.ipynb"  # a page of the site, executed (notebook_pages.py)
        rows.append(f"| [`{name}`]({name}) | {_cell(title)} |")
    return "\n".join(rows)


def _cell(text):
    return text.replace("|", "\\|")


def on_page_markdown(markdown, page, config, files):
    if "{{ steps_index }}" in markdown:
        markdown = markdown.replace("{{ steps_index }}", steps_index())
    if "{{ notebooks_index }}" in markdown:
        markdown = markdown.replace("{{ notebooks_index }}", notebooks_index())
    return markdown
