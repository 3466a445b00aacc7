"""The debug ladder of trace mode: one knob, set by DEZERO_DEBUG or debug(level).

Levels: 1 one line per trace or retrace (reason, node and kernel counts); 2 one line
per replay (time, bytes moved), and on the GPU per kernel call; 3 what each pass did
(fusion: why a node stays out of kernels, why kernels split) and the IR check; 4 the
replay code and kernel sources; 5 the IR before and after every pass. Output goes
to stderr.

    with dezero.static.debug(3): step(x, t)
"""
import contextlib
import os
import sys
import warnings

# =============================================================================
# The level: LEVEL, debug, log
# =============================================================================


def _level_from_env():
    text = os.environ.get("DEZERO_DEBUG", "").strip()
    try:
        return int(text or 0)
    except ValueError:
        warnings.warn(f"DEZERO_DEBUG={text!r} is not an integer level (0-5); ignoring it",
                      stacklevel=2)
        return 0


# Read at every decision point (module attribute), so debug() takes effect at once.
LEVEL = _level_from_env()


@contextlib.contextmanager
def debug(level: int):
    """Show trace-mode debug output up to `level` inside the with block."""
    global LEVEL
    old, LEVEL = LEVEL, int(level)
    try:
        yield
    finally:
        LEVEL = old


def log(level: int, message: str) -> None:
    if LEVEL >= level:
        print(message, file=sys.stderr)
