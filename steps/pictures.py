"""Saving the pictures the steps draw, without windows and without crashing.

Shared by the step scripts beside it (a script's own folder is on sys.path):
`save_graph` renders a computational graph with dezero's plot_dot_graph and
`pyplot` hands out matplotlib's pyplot on the file-only Agg backend. When
Graphviz or matplotlib is missing they say what was skipped and carry on.
    from pictures import pyplot, save_graph
"""
from dezero.utils import GraphvizNotFoundError, plot_dot_graph


def save_graph(output, to_file, verbose=False):
    """Draw the graph behind `output` into `to_file`; True when a file was written."""
    try:
        plot_dot_graph(output, verbose=verbose, to_file=to_file)
    except GraphvizNotFoundError as e:
        print(f"skipped drawing {to_file}: {e}")
        return False
    print(f"graph saved to {to_file}")
    return True


def pyplot():
    """matplotlib.pyplot set to the Agg backend, or None (with a note) when not installed."""
    try:
        import matplotlib
    except ImportError:
        print("skipped plots: matplotlib is not installed (pip install matplotlib)")
        return None
    matplotlib.use("Agg")  # must precede the pyplot import: files only, no window
    import matplotlib.pyplot as plt
    return plt
