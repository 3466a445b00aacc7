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

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
STEP_FILES = sorted((ROOT / "steps").glob("step[0-9][0-9].py"))
NUMBER = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"
# A drawing or a plot is either saved or, without Graphviz / matplotlib, skipped aloud.
GRAPH = r"graph saved to \S+\.png|skipped drawing \S+: .*Graphviz"
PLOT = r"plot saved to \S+\.png|skipped plots: matplotlib is not installed"
# Newton's method on x^4 - 2x^2 from x = 2 (steps 29 and 33).
NEWTON = [(rf"iteration 6: x = {NUMBER}", 1.0, 1e-9), (rf"iteration 7: x = {NUMBER}", 1.0, 1e-15)]

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
    23: [r"dezero \S+ imported from", r"y = variable\(16\.0\)", r"x\.grad = variable\(8\.0\)"],
    24: [r"sphere +at \(1, 1\): z = 2, gradient = \(2, 2\)",
         r"matyas +at \(1, 1\): z = 0\.04, gradient = \(0\.04, 0\.04\)",
         r"goldstein at \(1, 1\): z = 1876, gradient = \(-5376, 8064\)"],
    25: [r"x -> exp\nexp -> y", r"DOT text saved to sample\.dot", GRAPH],
    26: [(rf"functions in the graph: {NUMBER}", 38, 0), GRAPH],
    27: [(rf"F\.sin\(pi/4\) += {NUMBER}", 2 ** -0.5, 1e-12),
         (rf"my_sin\(pi/4\) = {NUMBER} .*threshold 0\.0001", 2 ** -0.5, 1e-6),
         (rf"my_sin\(pi/4\) = \S+ grad = {NUMBER} .*threshold 1e-20", 2 ** -0.5, 1e-12), GRAPH],
    28: [(rf"after 10000 iterations: x0 = {NUMBER}", 1.0, 0.01),
         (rf"after 10000 iterations: x0 = \S+, x1 = {NUMBER}", 1.0, 0.02)],
    29: NEWTON,
    30: [r"y\.creator: Sin", r"weak reference: ReferenceType", r"x\.grad\.creator: None"],
    31: [(rf"gx = {NUMBER}", np.cos(1.0), 1e-12), r"recorded by backward: Mul, Cos", GRAPH],
    32: [r"create_graph=False: x\.grad = variable\(24\.0\)  creator: None",
         r"create_graph=True: +x\.grad = variable\(24\.0\)  creator: \w+",
         r"second derivative: +x\.grad = variable\(44\.0\)"],
    33: NEWTON,
    34: [(rf"y'' +at x=1: {NUMBER}", -np.sin(1.0), 1e-6),
         (rf"y''' +at x=1: {NUMBER}", -np.cos(1.0), 1e-6), PLOT],
    35: [(rf"order 3: +{NUMBER}", -2 * (1 - np.tanh(1) ** 2) * (1 - 3 * np.tanh(1) ** 2), 1e-6),
         GRAPH],
    36: [r"dz/dx = variable\(100\.0\)", r"Hessian @ v = variable\(\[ +2\. -10\.\]\)"],
    37: [r"x\.grad = variable\(\[\[10\. 20\. 30\.\]", r"c\.grad = variable\(\[\[2\. 3\. 4\.\]"],
    38: [r"x\.grad shape: \(2, 3\)", r"x\.T shape: \(3, 2\)",
         r"x\.grad == w\.transpose\(2, 0, 1\): True"],
    39: [r"sum = variable\(21\)  x\.grad = variable\(\[1 1 1 1 1 1\]\)",
         r"sum\(axis=0\) = variable\(\[5 7 9\]\)"],
    40: [r"x\.grad = variable\(\[2 2 2\]\)", r"sum_to \(1, 3\): variable\(\[\[5 7 9\]\]\)",
         r"x1\.grad = variable\(\[3\]\)  shape \(1,\)"],
    41: [r"gx = gy W\^T: True", r"gW = x\^T gy: True", r"W\.grad shape: \(3, 4\)"],
}


# =============================================================================
# Harness: run_step, check_output, test_step
# =============================================================================
def run_step(path, workdir, **env_changes):
    env = dict(os.environ)
    env["DEZERO_CACHE_DIR"] = str(workdir / "dezero_cache")
    env.update(env_changes)
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


# =============================================================================
# Missing tools: drawing and plotting steps say what they skipped
# =============================================================================
def test_drawing_step_without_graphviz_skips_aloud(tmp_path):
    empty = tmp_path / "no_tools"
    empty.mkdir()
    result = run_step(ROOT / "steps" / "step26.py", tmp_path, PATH=str(empty))
    assert result.returncode == 0, result.stderr
    assert "skipped drawing goldstein.png" in result.stdout
    assert not (tmp_path / "goldstein.png").exists()


def test_plotting_step_without_matplotlib_skips_aloud(tmp_path):
    # A package that fails to import stands in for an uninstalled matplotlib.
    stub = tmp_path / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('matplotlib hidden by the test')\n")
    result = run_step(ROOT / "steps" / "step34.py", tmp_path, PYTHONPATH=str(stub.parent))
    assert result.returncode == 0, result.stderr
    assert "skipped plots: matplotlib is not installed" in result.stdout
