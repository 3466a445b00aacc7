"""The errors of trace mode and where they point: TraceError, GraphError, GraphFileError.

A bottom module: it imports nothing of dezero, so the eager library (functions.py's
batch_norm refuses plain running statistics under a trace) raises TraceError without
importing dezero.static. where() names the user's line in every such message.

    raise TraceError(f"float() of a traced value ({where()})")
"""
from __future__ import annotations

import linecache
import os
import sys

# =============================================================================
# Errors: TraceError, GraphError, GraphFileError
# =============================================================================


class TraceError(RuntimeError):
    """A traced function did something a static graph cannot express faithfully."""


class GraphError(ValueError):
    """A StaticGraph breaks one of the IR's rules (see StaticGraph.check)."""


class GraphFileError(ValueError):
    """A saved graph cannot be read: corrupt, truncated, mismatched, crafted or too new."""


# =============================================================================
# Locating the user's line: user_frame, user_stacklevel, where
# =============================================================================

_DEZERO_DIR = os.path.dirname(os.path.abspath(__file__))
_IN_DEZERO: dict[str, bool] = {}  # filename -> whether it lies in the dezero package


def _in_dezero(frame) -> bool:
    filename = frame.f_code.co_filename
    inside = _IN_DEZERO.get(filename)
    if inside is None:
        inside = _IN_DEZERO[filename] = os.path.abspath(filename).startswith(
            _DEZERO_DIR + os.sep)
    return inside


def user_frame():
    """The innermost stack frame outside the dezero package (the user's code).
    Every recorded op asks (for its node's source line), hence the cache."""
    frame = sys._getframe(1)
    while frame is not None and _in_dezero(frame):
        frame = frame.f_back
    return frame


def user_stacklevel() -> int:
    """The stacklevel that makes its caller's warnings.warn name the user's line, so
    that Python's default filters show a warning once per line of the user's code."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and _in_dezero(frame):
        frame, level = frame.f_back, level + 1
    return level


def where(frame=None) -> str:
    """'train.py:12, `if float(loss) > 10:`' for the user's line (or frame's), or ''
    if unknown."""
    frame = frame or user_frame()
    if frame is None:
        return ""
    filename, lineno = frame.f_code.co_filename, frame.f_lineno
    source = linecache.getline(filename, lineno).strip()
    text = f"{os.path.basename(filename)}:{lineno}"
    return f"{text}, `{source}`" if source else text
