"""Build the tutorial notebooks (notebooks/*.ipynb) from their sources in notebooks/src/.

Each source is a plain Python file in "percent" form: `# %%` starts a code cell and
`# %% [markdown]` a markdown cell whose lines are comments. The notebooks are written
without outputs and with stable cell ids, so the same source gives the same bytes.

    python notebooks/build.py          # rewrite notebooks/*.ipynb
    python notebooks/build.py --check  # exit 1 if a stored notebook is out of date
"""
import argparse
import pathlib
import sys

import nbformat

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = HERE / "src"

# =============================================================================
# Sources to notebooks: parse_cells, build_notebook, build_all
# =============================================================================


def parse_cells(text):
    """[(kind, source)] of a percent-form file; kind is "code" or "markdown"."""
    cells, kind, lines = [], None, []

    def flush():
        if kind is not None:
            body = "\n".join(lines).strip("\n")
            if body:
                cells.append((kind, body))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind == "markdown":
            if line.strip() and not line.startswith("#"):
                raise ValueError(f"markdown line without a leading '#': {line!r}")
            lines.append(line[2:] if line.startswith("# ") else line[1:])
        elif kind == "code":
            lines.append(line)
    flush()
    return cells


def build_notebook(source_path):
    """The notebook (an nbformat node, no outputs) for one source file."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    stem = source_path.stem
    for i, (kind, body) in enumerate(parse_cells(source_path.read_text(encoding="utf-8"))):
        # Ids from position keep rebuilt notebooks byte-identical.
        cell_id = f"{stem[:2]}-{i:02d}"
        if kind == "markdown":
            nb.cells.append(nbformat.v4.new_markdown_cell(body, id=cell_id))
        else:
            nb.cells.append(nbformat.v4.new_code_cell(body, id=cell_id))
    nbformat.validate(nb)
    return nb


def notebook_text(source_path):
    return nbformat.writes(build_notebook(source_path)) + "\n"


def build_all(check=False):
    """Write (or, with check, compare) every notebook; return the stale paths."""
    stale = []
    for source in sorted(SOURCES.glob("[0-9][0-9]_*.py")):
        target = HERE / (source.stem + ".ipynb")
        text = notebook_text(source)
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(target)
        if not check:
            target.write_text(text, encoding="utf-8")
    return stale


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="only report notebooks that differ from their sources")
    args = parser.parse_args(argv)
    stale = build_all(check=args.check)
    for path in stale:
        print(("out of date: " if args.check else "wrote ") + str(path.relative_to(HERE.parent)))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
