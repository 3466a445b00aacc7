"""Rules for the test suite itself."""
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SKIPPED_DEZERO_IMPORT = re.compile(r"""importorskip\(\s*["']dezero\b""")


def test_no_test_skips_when_a_dezero_module_fails_to_import():
    # importorskip turns a broken import of dezero's own code into a quiet skip;
    # only optional third-party packages (torch, nbformat, ...) may be skipped.
    offenders = [f"{path.relative_to(TESTS)}:{number}"
                 for path in sorted(TESTS.rglob("*.py"))
                 for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if SKIPPED_DEZERO_IMPORT.search(line)]
    assert offenders == [], f"import dezero modules plainly, not with importorskip: {offenders}"
