"""Runs every steps/stepNN.py as a script and checks the values it prints.

Each step runs in a fresh subprocess (the interpreter running pytest) inside a
temporary working directory, so pictures land there, and with DEZERO_CACHE_DIR
pointing there, so nothing is downloaded or read from a user's cache.
Usage: python -m pytest -q tests/test_steps.py
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STEP_FILES = sorted((ROOT / "steps").glob("step[0-9][0-9].py"))
NUMBER = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"

# =============================================================================
# Expectations: CHECKS maps a step number to what its output must contain
# =============================================================================
# An entry is either a regex that must match somewhere in stdout, or a tuple
# (regex with one number group, expected value, absolute tolerance).
CHECKS = {
    1: [r"x\.data = 2\.0", r"ndim=2 shape=\(2, 3\)"],
    2: [r"y\.data = 100"],
    3: [(rf"y\.data = {NUMBER}", 1.6487212707, 1e-9)],
    4: [(rf"numerical d\(x\^2\)/dx at 2\.0: {NUMBER}", 4.0, 1e-9),
        (rf"numerical dy/dx at 0\.5: {NUMBER}", 3.2974425414, 1e-6),
        (rf"absolute error: {NUMBER}", 8.8e-8, 1e-8)],
    5: [(rf"dy/dx \(backward\) = {NUMBER}", 3.2974425414, 1e-9),
        (rf"dy/dx \(numerical\)= {NUMBER}", 3.2974425414, 1e-6)],
    6: [(rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9)],
    7: [r"y <- C <- b <- B <- a <- A <- x", (rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9)],
    8: [(rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9),
        (rf"5000 identity functions: {NUMBER}", 1.0, 0)],
    9: [(rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9), r"TypeError: Variable holds a numpy"],
    10: [r"ran 5 tests, failures: 0, errors: 0"],
    11: [r"2 \+ 3 = 5"],
    12: [r"add\(2, 3\) = 5"],
    13: [(rf"z = {NUMBER}", 13.0, 0), (rf"x\.grad = {NUMBER}", 4.0, 0),
         (rf"y\.grad = {NUMBER}", 6.0, 0)],
    14: [(rf"y = x \+ x: +x\.grad = {NUMBER}", 2.0, 0),
         (rf"y = \(x \+ x\) \+ x: x\.grad = {NUMBER}", 3.0, 0)],
    15: [(rf"x\.grad \(step 14\) = {NUMBER}", 96.0, 0), r"order by generation: add -> B -> C -> A"],
    16: [(rf"y = {NUMBER}", 32.0, 0), (rf"x\.grad = {NUMBER}", 64.0, 0)],
    17: [r"freed without the garbage collector: True", (rf"x\.grad = {NUMBER}", 64.0, 0)],
    18: [r"y\.grad = None  t\.grad = None", r"x0\.grad = 2\.0  x1\.grad = 1\.0",
         r"in no_grad: +y\.creator is None"],
    19: [r"shape: \(2, 3\)  ndim: 2  size: 6", r"len: 2",
         r"variable\(\[\[1 2 3\]\n {10}\[4 5 6\]\]\)"],
    20: [r"y = variable\(7\.0\)",
         (rf"a\.grad = {NUMBER}", 2.0, 0), (rf"b\.grad = {NUMBER}", 3.0, 0)],
    21: [r"x \+ 3\.0 += variable\(5\.0\)", r"3\.0 \* x \+ 1\.0 += variable\(7\.0\)",
         r"np\.array\(\[2\.0\]\) \+ x = variable\(\[4\.\]\)"],
    22: [r"2\.0 - x = variable\(0\.0\)", r"3\.0 / x = variable\(1\.5\)",
         (rf"d/dx = {NUMBER}", 12.0, 0), (rf"d/dx \(x-1\)/\(x\+1\) = {NUMBER}", 2 / 9, 1e-12)],
}


# =============================================================================
# Harness: run_step, check_output, test_step
# =============================================================================
def run_step(path, workdir):
    env = dict(os.environ)
    env["DEZERO_CACHE_DIR"] = str(workdir / "dezero_cache")
    env["MPLBACKEND"] = "Agg"
    return subprocess.run([sys.executable, str(path)], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=120)


def check_output(number, stdout):
    for check in CHECKS.get(number, []):
        if isinstance(check, str):
            assert re.search(check, stdout), f"step {number}: no match for {check!r}"
            continue
        pattern, expected, tol = check
        match = re.search(pattern, stdout)
        assert match, f"step {number}: no match for {pattern!r}"
        value = float(match.group(1))
        assert abs(value - expected) <= tol, (
            f"step {number}: {pattern!r} gave {value}, expected {expected} +- {tol}")


@pytest.mark.parametrize("path", STEP_FILES, ids=[p.stem for p in STEP_FILES])
def test_step(path, tmp_path):
    number = int(path.stem[len("step"):])
    result = run_step(path, tmp_path)
    assert result.returncode == 0, (
        f"{path.name} exited with {result.returncode}\n{result.stdout}\n{result.stderr}")
    assert "Traceback" not in result.stderr, result.stderr
    check_output(number, result.stdout)


def test_every_step_has_checks():
    numbers = {int(p.stem[len("step"):]) for p in STEP_FILES}
    assert numbers == set(CHECKS), f"steps without checks: {sorted(numbers - set(CHECKS))}"
