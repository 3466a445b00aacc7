"""The size budgets of tools/code_size.py: the core and the trace compiler stay
small enough to read in a day."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import code_size  # noqa: E402


def test_code_lines_skip_comments_docstrings_and_blanks(tmp_path):
    path = tmp_path / "m.py"
    path.write_text('"""Doc\nstring."""\n\n# comment\ndef f():\n    """Doc."""\n'
                    '    return (1 +\n            2)  # why\n')
    assert code_size.code_lines(path) == 3


def test_budgeted_modules_stay_within_budget():
    rows = code_size.report(set(code_size.BUDGETS))
    budgeted = {name for name, _, budget in rows if budget is not None}
    assert budgeted == set(code_size.BUDGETS), "a budgeted module was renamed or removed"
    over = [(name, lines, budget) for name, lines, budget in rows
            if budget is not None and lines > budget]
    assert not over, f"over budget (raise it in tools/code_size.py with a reason): {over}"


def test_packages_stay_within_budget():
    rows = code_size.report()
    for package, budget in code_size.PACKAGE_BUDGETS.items():
        lines = code_size.package_lines(package, rows)
        assert 0 < lines <= budget, f"{package}: {lines} code lines, budget {budget}"
