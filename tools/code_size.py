"""Code lines per module (no blank lines, comments or docstrings), against budgets.

core.py and each module of dezero/static/ have a budget; crossing one is allowed
only together with a raised budget here and the reason in the commit message.
tests/test_code_size.py keeps them honest.

    python tools/code_size.py
"""
import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Module (relative to the repository) -> most code lines it may have.
BUDGETS = {
    "dezero/core.py": 380,
    "dezero/op_record.py": 110,
    "dezero/static/trace.py": 602,
    "dezero/static/tracer.py": 451,
    "dezero/static/guard.py": 184,
    "dezero/static/ir.py": 309,
    "dezero/static/graph.py": 92,
    "dezero/static/symbols.py": 290,
    "dezero/static/names.py": 49,
    "dezero/static/sizes.py": 357,
    "dezero/static/symint.py": 155,
    "dezero/static/slots.py": 35,
    "dezero/static/passes.py": 594,
    "dezero/static/reach.py": 374,
    "dezero/static/horizontal.py": 96,
    "dezero/static/saving.py": 493,
    "dezero/static/randomness.py": 116,
    "dezero/static/watch.py": 112,
    "dezero/static/fast.py": 72,
    "dezero/static/drawing.py": 55,
    "dezero/static/checking.py": 111,
    "dezero/static/debugging.py": 24,
    "dezero/kernels/codegen.py": 152,
    "dezero/kernels/reductions.py": 130,
    "dezero/static/lowering.py": 272,
    "dezero/static/backends/__init__.py": 28,
    "dezero/static/backends/interpreter.py": 74,
    "dezero/static/backends/pycode.py": 252,
    "dezero/kernels/gpu.py": 98,
    "dezero/kernels/gpu_reductions.py": 214,
    "dezero/kernels/cpu.py": 416,
    "dezero/kernels/cpu_reductions.py": 202,
    "dezero/kernels/pending.py": 70,
    "dezero/kernels/measure.py": 104,
    "dezero/kernels/cache.py": 45,
    "dezero/kernels/outputs.py": 25,
}


# Package (a folder of the repository) -> most code lines all its modules may have:
# static/, what a learner reads to see define-and-run (3812 lines when it was last
# laid out), and the kernel compiler above it.
PACKAGE_BUDGETS = {
    "dezero/static/": 5195,
    "dezero/kernels/": 1455,
}


def code_lines(path):
    """Lines holding code: not blank, not only a comment, not part of a docstring."""
    source = Path(path).read_text(encoding="utf-8")
    docstring_lines = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            docstring_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE,
                          tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER):
            continue
        for line in range(token.start[0], token.end[0] + 1):
            if line not in docstring_lines:
                lines.add(line)
    return len(lines)


def report(names=None):
    """(module, lines, budget or None) for every module of the package, or for
    those of `names`."""
    rows = []
    for path in sorted((ROOT / "dezero").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if names is None or name in names:
            rows.append((name, code_lines(path), BUDGETS.get(name)))
    return rows


def package_lines(package, rows=None) -> int:
    """The code lines of every module under `package` (a folder such as dezero/static/)."""
    return sum(lines for name, lines, _ in rows or report() if name.startswith(package))


def main():
    over, rows = False, report()
    for name, lines, budget in rows:
        mark = ""
        if budget is not None:
            mark = f"/ {budget}" + ("  OVER BUDGET" if lines > budget else "")
            over |= lines > budget
        print(f"{name:45s} {lines:5d} {mark}")
    for package, budget in PACKAGE_BUDGETS.items():
        lines = package_lines(package, rows)
        print(f"{package + ' (all)':45s} {lines:5d} / {budget}"
              + ("  OVER BUDGET" if lines > budget else ""))
        over |= lines > budget
    print(f"{'total':45s} {sum(lines for _, lines, _ in rows):5d}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
