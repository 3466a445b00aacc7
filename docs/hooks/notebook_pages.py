"""MkDocs hook: the tutorial notebooks as pages, executed, with their outputs.

The notebooks are stored without outputs (notebooks/NN_*.ipynb). Each build runs
every one top to bottom in a fresh python3 kernel (nbclient), in a scratch folder,
importing this checkout's dezero, and hands the executed copy to mkdocs-jupyter,
which renders it with its printed output and pictures as the page
notebooks/NN_name/. A notebook that raises fails the build, naming it.

An executed copy is kept in a cache keyed by everything that decides its outputs
(the notebook, dezero's sources, the Python and numpy versions), so a build
without changes does not run the notebooks again; tests/test_notebooks.py runs them
through the same function. The cache folder is $DEZERO_NOTEBOOK_CACHE, else
~/.cache/dezero/notebooks.

    mkdocs build --strict
"""
import hashlib
import os
import pathlib
import shutil
import sys
import tempfile

try:
    from mkdocs.plugins import event_priority
except ImportError:  # tests/test_notebooks.py runs notebooks without the docs extra
    def event_priority(priority):
        return lambda f: f

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

# =============================================================================
# Running a notebook: executed, cache_key
# =============================================================================


def cache_folder():
    return pathlib.Path(os.environ.get("DEZERO_NOTEBOOK_CACHE") or
                        pathlib.Path.home() / ".cache" / "dezero" / "notebooks")


def cache_key(path):
    """sha256 of what decides the outputs: the notebook, every source file of dezero,
    the Python and numpy versions."""
    import numpy
    digest = hashlib.sha256()
    for part in [pathlib.Path(path), *sorted((ROOT / "dezero").rglob("*.py"))]:
        digest.update(part.relative_to(ROOT).as_posix().encode() + b"\0" + part.read_bytes())
    digest.update(f"{sys.version}\0{numpy.__version__}".encode())
    return digest.hexdigest()


def executed(path, timeout=180):
    """The path of an executed copy of the notebook `path` (from the cache, or run
    now and cached); a cell that raises is a RuntimeError naming the notebook."""
    import nbclient
    import nbformat
    path = pathlib.Path(path)
    target = cache_folder() / f"{path.stem}-{cache_key(path)[:24]}.ipynb"
    if target.exists():
        return target
    nb = nbformat.read(str(path), as_version=4)
    env_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(ROOT) + (os.pathsep + env_path if env_path else "")
    try:
        with tempfile.TemporaryDirectory() as scratch:  # notebooks write graph files
            nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                    resources={"metadata": {"path": scratch}}).execute()
    except nbclient.exceptions.CellExecutionError as e:
        raise RuntimeError(f"notebook {path.name} failed:\n{e}") from None
    finally:
        if env_path is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = env_path
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    nbformat.write(nb, str(partial))
    os.replace(partial, target)  # whole or absent, for a build running beside
    return target


# =============================================================================
# MkDocs events: the executed notebooks join the site's files
# =============================================================================

_scratch = None


@event_priority(100)  # before mkdocs-jupyter turns .ipynb into pages
def on_files(files, config):
    from mkdocs.structure.files import File
    global _scratch
    _scratch = tempfile.mkdtemp(prefix="dezero-notebook-pages-")
    for path in NOTEBOOKS:
        folder = pathlib.Path(_scratch, "notebooks")
        folder.mkdir(exist_ok=True)
        shutil.copy(executed(path), folder / path.name)
        files.append(File(f"notebooks/{path.name}", _scratch, config["site_dir"],
                          config["use_directory_urls"]))
    return files


def on_post_build(config):
    if _scratch is not None:
        shutil.rmtree(_scratch, ignore_errors=True)
