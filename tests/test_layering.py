"""The package's layers, read from its source with ast (imports inside functions count):
the eager library imports nothing of trace mode (dezero.static, dezero.kernels), static/
imports nothing of the kernel compiler above it, ir.py imports none of the modules that
consume it, and the modules of both import each other without a cycle."""
import ast
from pathlib import Path

import dezero

PACKAGE = Path(dezero.__file__).parent

# Modules outside static/ that may use trace mode: the package's front door (dezero.trace)
# and the programs it runs (the demo trains with trace=True).
ABOVE_STATIC = {"dezero", "dezero.__main__", "dezero.demo"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(name: str) -> set:
    """The dezero modules `name` imports anywhere in its source (a name imported from
    a package counts as its submodule where one of that name exists)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in MODULES else base)
    return {m for m in found if m in MODULES}


TRACE_MODE = ("dezero.static", "dezero.kernels")


def test_the_eager_library_imports_nothing_of_static():
    eager = [m for m in MODULES if not m.startswith(TRACE_MODE) and m not in ABOVE_STATIC]
    assert "dezero.functions" in eager and "dezero.core" in eager
    wrong = {m: sorted(i for i in imports(m) if i.startswith(TRACE_MODE)) for m in eager}
    assert {m: i for m, i in wrong.items() if i} == {}


def test_static_imports_nothing_of_the_kernel_compiler():
    # static/ reaches the kernel backends by name only (backends/__init__.py's BACKENDS).
    static = [m for m in MODULES if m.startswith("dezero.static")]
    wrong = {m: sorted(i for i in imports(m) if i.startswith("dezero.kernels"))
             for m in static}
    assert {m: i for m, i in wrong.items() if i} == {}
    assert "dezero.static.ir" in imports("dezero.kernels.codegen")  # the rule has teeth


def test_the_scanner_sees_imports_inside_functions():
    # What the rules rest on: an import in a function body counts as much as one at the top.
    assert "dezero.core" in imports("dezero.utils")  # utils imports core only in functions


def test_trace_errors_keep_their_old_import_paths():
    import dezero.errors
    import dezero.static
    import dezero.static.saving
    assert dezero.TraceError is dezero.static.TraceError is dezero.errors.TraceError
    assert dezero.static.GraphError is dezero.errors.GraphError
    assert dezero.static.GraphFileError is dezero.static.saving.GraphFileError


# What ir.py may build on: the array modules, the errors, the op records and the naming
# rules of generated code.
BELOW_IR = {"dezero.cuda", "dezero.errors", "dezero.op_record", "dezero.static.names",
            "dezero.static.sizes"}


def test_ir_imports_none_of_its_consumers():
    assert imports("dezero.static.ir") <= BELOW_IR
    assert "dezero.static.ir" in imports("dezero.static.passes")  # the rule has teeth


def cycles(edges: dict) -> list:
    """The cycles of a graph {module: [modules it imports]}, each as a list of modules
    (depth-first search)."""
    found, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for n in edges[m]:
            if state.get(n) == "open":
                found.append(path[path.index(n):] + [n])
            elif n not in state:
                visit(n, path + [n])
        state[m] = "done"

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    return found


def test_static_and_the_kernel_compiler_have_no_import_cycle():
    modules = [m for m in MODULES if m.startswith(TRACE_MODE)]
    assert len(modules) > 25
    assert cycles({m: sorted(imports(m) & set(modules)) for m in modules}) == []
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"]}) == [["a", "b", "c", "a"]]
