"""Names and literals of generated code: letter_name, dotted, is_source_name,
identifier, source_literal, printable.

Below ir.py: the IR names its values a, b, c ... (letter_name) and checks that every
name is one generated code may bind (is_source_name); the tracer, the passes and the
replay code make names from any text (identifier) and literals from plain values.

State has two names. Its place, shown by print(graph) and drawings, says where it
lives as the traced code reaches it, one dot per step: attributes, list and tuple
indices and dict keys that are identifiers (`m.layers[0].W` is `m.layers.0.W`,
`cfg['w']` is `cfg.w`); an optimizer's slot of a parameter is the slot table
indexed by the parameter's place without its root (`opt.ms[layers.0.W]`), and a
.grad read as state is its Variable's place plus `.grad`. Its name, the variable
generated code binds, is the place made an identifier (`m_layers_0_W`).

    identifier("l0.W", "s")  # 'l0_W';  source_literal((1, 2.5))  # '(1, 2.5)'
    dotted("m.layers[0].W")  # 'm.layers.0.W'
"""
from __future__ import annotations

import builtins
import functools
import keyword
import math
import re
import unicodedata

# =============================================================================
# Value names: letter_name
# =============================================================================


@functools.cache  # a large graph names thousands of values, in every pass
def letter_name(n: int) -> str:
    """0 -> 'a', 25 -> 'z', 26 -> 'ba': the names a jaxpr gives its values ('id_' and
    'if_' where the letters spell a builtin or a keyword)."""
    letters = []
    while True:
        letters.append(chr(ord("a") + n % 26))
        n //= 26
        if n == 0:
            name = "".join(reversed(letters))
            return name if is_source_name(name) else name + "_"


def dotted(place: str) -> str:
    """A place as code spells it ('opt.ms[layers[0].W]', "cfg['w']") with indices
    and identifier keys as dotted steps ('opt.ms[layers.0.W]', 'cfg.w'); other keys
    keep their brackets ("cfg['a b']")."""
    return re.sub(r"\[(\d+)\]|\['([A-Za-z_]\w*)'\]", lambda m: "." + (m[1] or m[2]), place)


# =============================================================================
# Names and literals of generated code: is_source_name, identifier, source_literal
# =============================================================================

# Generated code may call any builtin (float("nan")) and names its own helpers with
# a leading '_' (_xp, _arr), so its variables may be neither.
_BUILTINS = frozenset(name for name in vars(builtins) if not name.startswith("_"))


def is_source_name(text) -> bool:
    """True for a name generated code may bind: an identifier in normal form (the
    parser folds 'ｐｒｉｎｔ' to 'print'), no keyword, no builtin, no leading '_'."""
    return isinstance(text, str) and _is_source_str(text)


@functools.lru_cache(maxsize=1 << 16)  # every pass checks every value's name
def _is_source_str(text: str) -> bool:
    return text.isidentifier() and text[0] != "_" and (
        text.isascii() or unicodedata.normalize("NFKC", text) == text) and text not in \
        _BUILTINS and not keyword.iskeyword(text) and not keyword.issoftkeyword(text)


def identifier(text: str | None, default: str) -> str:
    """A name generated code may bind (is_source_name), made from any text: values
    become variables of the replay code."""
    text = re.sub(r"\W", "_", unicodedata.normalize("NFKC", text or ""))
    if not text.isidentifier():  # \w admits a few characters identifiers do not
        text = re.sub(r"[^0-9A-Za-z_]", "_", text)
    text = text.lstrip("_0123456789") or default
    if not is_source_name(text):  # a keyword or builtin: 'sum' -> 'sum_'
        text += "_"
    return text if is_source_name(text) else default


def source_literal(value) -> str | None:
    """Python source for a plain value (None, bool, int, float, a word of ASCII
    letters, digits and '_' such as a dtype name, tuples of them), re-rendered from
    its type, or None for any other value: generated code holds no other literal."""
    if value is None or type(value) in (bool, int):
        return repr(value)
    if type(value) is str and re.fullmatch(r"\w*", value, re.ASCII):
        return repr(value)  # nothing in it can end the quotes
    if type(value) is float:
        return repr(value) if math.isfinite(value) else f"float('{value}')"
    if type(value) is tuple:
        parts = [source_literal(v) for v in value]
        if None in parts:
            return None
        return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"
    return None


def printable(text: str) -> str:
    """text with line breaks and other unprintable characters escaped: safe to put on
    one line of a comment in generated code."""
    return text if text.isprintable() else repr(text)[1:-1]
