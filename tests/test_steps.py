"""Runs every steps/stepNN.py as a script and checks the values it prints.

Each step runs in a fresh subprocess (the interpreter running pytest) inside a
temporary working directory, so pictures land there, and with DEZERO_CACHE_DIR
pointing there, so nothing is downloaded or read from a user's cache, and with
DEZERO_STEPS_QUICK=1, which makes the steps that train for minutes when run by
hand (75, 76) train a smaller model for a few steps.
Usage: python -m pytest -q tests/test_steps.py
"""
import gzip
import os
import re
import subprocess
import sys
import venv
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import dezero.cuda

ROOT = Path(__file__).resolve().parents[1]
STEP_FILES = sorted((ROOT / "steps").glob("step[0-9][0-9].py"))
NUMBER = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


# =============================================================================
# Expectations: CHECKS maps a step number to what its output must contain
# =============================================================================
def between(pattern, low, high):
    """The number that `pattern` captures must lie in [low, high]."""
    return (pattern, low, high)


def near(pattern, value, tol):
    return between(pattern, value - tol, value + tol)


# A drawing or a plot is either saved or, without Graphviz / matplotlib, skipped aloud.
GRAPH = r"graph saved to \S+\.png|skipped drawing \S+: .*Graphviz"
PLOT = r"plot saved to \S+\.png|skipped plots: matplotlib is not installed"
# Steps 52-53 use a GPU when cupy finds one, and say so when not.
GPU = dezero.cuda.gpu_enable
# Offline, the MNIST steps must announce their stand-in.
OFFLINE_MNIST = r"MNIST \(train\) is not available, so this run uses a stand-in"
# Newton's method on x^4 - 2x^2 from x = 2 (steps 29 and 33).
NEWTON = [near(rf"iteration 6: x = {NUMBER}", 1.0, 1e-9),
          near(rf"iteration 7: x = {NUMBER}", 1.0, 1e-15)]

# An entry is either a regex that must match somewhere in stdout, or a number
# check made by `near` or `between` from a regex with one number group.
CHECKS = {
    1: [r"x\.data = 2\.0", r"ndim=2 shape=\(2, 3\)"],
    2: [r"y\.data = 100"],
    3: [near(rf"y\.data = {NUMBER}", 1.6487212707, 1e-9)],
    4: [near(rf"numerical d\(x\^2\)/dx at 2\.0: {NUMBER}", 4.0, 1e-9),
        near(rf"numerical dy/dx at 0\.5: {NUMBER}", 3.2974425414, 1e-6),
        near(rf"absolute error: {NUMBER}", 8.8e-8, 1e-8)],
    5: [near(rf"dy/dx \(backward\) = {NUMBER}", 3.2974425414, 1e-9),
        near(rf"dy/dx \(numerical\)= {NUMBER}", 3.2974425414, 1e-6)],
    6: [near(rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9)],
    7: [r"y <- C <- b <- B <- a <- A <- x", near(rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9)],
    8: [near(rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9),
        near(rf"5000 identity functions: {NUMBER}", 1.0, 0)],
    9: [near(rf"x\.grad = {NUMBER}", 3.2974425414, 1e-9), r"TypeError: Variable holds a numpy"],
    10: [r"ran 5 tests, failures: 0, errors: 0"],
    11: [r"2 \+ 3 = 5"],
    12: [r"add\(2, 3\) = 5"],
    13: [near(rf"z = {NUMBER}", 13.0, 0), near(rf"x\.grad = {NUMBER}", 4.0, 0),
         near(rf"y\.grad = {NUMBER}", 6.0, 0)],
    14: [near(rf"y = x \+ x: +x\.grad = {NUMBER}", 2.0, 0),
         near(rf"y = \(x \+ x\) \+ x: x\.grad = {NUMBER}", 3.0, 0)],
    15: [near(rf"x\.grad \(step 14\) = {NUMBER}", 96.0, 0),
         r"order by generation: add -> B -> C -> A"],
    16: [near(rf"y = {NUMBER}", 32.0, 0), near(rf"x\.grad = {NUMBER}", 64.0, 0)],
    17: [r"freed without the garbage collector: True", near(rf"x\.grad = {NUMBER}", 64.0, 0)],
    18: [r"y\.grad = None  t\.grad = None", r"x0\.grad = 2\.0  x1\.grad = 1\.0",
         r"in no_grad: +y\.creator is None"],
    19: [r"shape: \(2, 3\)  ndim: 2  size: 6", r"len: 2",
         r"variable\(\[\[1 2 3\]\n {10}\[4 5 6\]\]\)"],
    20: [r"y = variable\(7\.0\)",
         near(rf"a\.grad = {NUMBER}", 2.0, 0), near(rf"b\.grad = {NUMBER}", 3.0, 0)],
    21: [r"x \+ 3\.0 += variable\(5\.0\)", r"3\.0 \* x \+ 1\.0 += variable\(7\.0\)",
         r"np\.array\(\[2\.0\]\) \+ x = variable\(\[4\.\]\)"],
    22: [r"2\.0 - x = variable\(0\.0\)", r"3\.0 / x = variable\(1\.5\)",
         near(rf"d/dx = {NUMBER}", 12.0, 0),
         near(rf"d/dx \(x-1\)/\(x\+1\) = {NUMBER}", 2 / 9, 1e-12)],
    23: [r"dezero \S+ imported from",
         r"core_simple: y = variable\(16\.0\)  x\.grad = 8\.0 \(float64\)",
         r"core: +y = variable\(16\.0\)  x\.grad = variable\(8\.0\) \(Variable\)"],
    24: [r"sphere +at \(1, 1\): z = 2, gradient = \(2, 2\)",
         r"matyas +at \(1, 1\): z = 0\.04, gradient = \(0\.04, 0\.04\)",
         r"goldstein at \(1, 1\): z = 1876, gradient = \(-5376, 8064\)"],
    25: [r"x -> exp\nexp -> y", r"DOT text saved to sample\.dot", GRAPH],
    26: [near(rf"functions in the graph: {NUMBER}", 38, 0), GRAPH],
    27: [near(rf"F\.sin\(pi/4\) += {NUMBER}", 2 ** -0.5, 1e-12),
         near(rf"my_sin\(pi/4\) = {NUMBER} .*threshold 0\.0001", 2 ** -0.5, 1e-6),
         near(rf"my_sin\(pi/4\) = \S+ grad = {NUMBER} .*threshold 1e-20", 2 ** -0.5, 1e-12), GRAPH],
    28: [near(rf"after 10000 iterations: x0 = {NUMBER}", 1.0, 0.01),
         near(rf"after 10000 iterations: x0 = \S+, x1 = {NUMBER}", 1.0, 0.02)],
    29: NEWTON,
    30: [r"y\.creator: Sin", r"weak reference: ReferenceType", r"x\.grad\.creator: None"],
    31: [near(rf"gx = {NUMBER}", np.cos(1.0), 1e-12), r"recorded by backward: Mul, Cos", GRAPH],
    32: [r"create_graph=False: x\.grad = variable\(24\.0\)  creator: None",
         r"create_graph=True: +x\.grad = variable\(24\.0\)  creator: \w+",
         r"second derivative: +x\.grad = variable\(44\.0\)"],
    33: NEWTON,
    34: [near(rf"y'' +at x=1: {NUMBER}", -np.sin(1.0), 1e-6),
         near(rf"y''' +at x=1: {NUMBER}", -np.cos(1.0), 1e-6), PLOT],
    35: [near(rf"order 3: +{NUMBER}", -2 * (1 - np.tanh(1) ** 2) * (1 - 3 * np.tanh(1) ** 2), 1e-6),
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
    42: [near(rf"learned: +W = {NUMBER}", 2.0, 0.1),
         near(rf"learned: +W = \S+, b = {NUMBER}", 5.5, 0.1),
         near(rf"iter 299: loss {NUMBER}", 0.0762, 0.001), PLOT],
    43: [between(rf"final loss: {NUMBER}", 0.0, 0.09), PLOT],
    44: [r"p \* v is a Variable", between(rf"final loss: {NUMBER}", 0.0, 0.09),
         r"l1 parameters: \[\('W', \(1, 10\)\), \('b', \(10,\)\)\]", PLOT],
    45: [r"TwoLayerNet output shape: \(5, 10\)  parameters: 4", GRAPH,
         between(rf"final loss: {NUMBER}", 0.0, 0.09)],
    46: [between(rf"SGD +iter 1000: loss {NUMBER}", 0.2, 1.0),  # still on the plateau
         between(rf"MomentumSGD iter 1000: loss {NUMBER}", 0.0, 0.09),  # already fitted
         between(rf"SGD +final loss after \d+ iterations: {NUMBER}", 0.0, 0.09),
         between(rf"MomentumSGD final loss after \d+ iterations: {NUMBER}", 0.0, 0.09)],
    47: [r"x\[1\] = variable\(\[4 5 6\]\)  x\.grad = \[\[0, 0, 0\], \[1, 1, 1\]\]",
         r"x\[\[0, 0, 1\]\] shape: \(3, 3\)  x\[:, 2\] = variable\(\[3 6\]\)",
         r"probabilities sum to 1 per row: True",
         r"softmax_cross_entropy = (\S+), by hand = \1"],
    48: [between(rf"train accuracy: {NUMBER}", 0.95, 1.0), PLOT],
    49: [r"len\(train_set\) = 300", between(rf"train accuracy: {NUMBER}", 0.95, 1.0)],
    50: [near(rf"accuracy of the example: {NUMBER}", 2 / 3, 1e-6),
         between(rf"final train accuracy: {NUMBER}", 0.95, 1.0),
         between(rf"final test accuracy: {NUMBER}", 0.9, 1.0), PLOT],
    51: [OFFLINE_MNIST, between(rf"test accuracy: {NUMBER}", 0.9, 1.0)],
    52: [OFFLINE_MNIST, r"epoch 2 on the GPU: loss" if GPU else r"GPU: skipped"],
    53: [OFFLINE_MNIST, r"epoch 2: loss" if GPU else r"GPU: not used",
         r"saved my_mlp\.npz: \{'l0/W': \(784, 100\)",
         r"predicts the same: True"],
    54: [r"zeroed: \d+ of 10", r"test mode: +\[1\. 1\. 1\. 1\. 1\. 1\. 1\. 1\. 1\. 1\.\]",
         r"after the block Config\.train = True",
         near(rf"mean over 100000 units in train mode: {NUMBER}", 1.0, 0.02)],
    55: [r"input 4x4, kernel 3x3, stride 1, pad 1 -> output 4x4", r"H=  7 K=3 S=2 P=0 -> 3"],
    56: [r"\[\[18\. 19\.\]\n \[ 9\. 18\.\]\]", r"output \(2, 2, 2\)"],
    57: [r"\(1, 3, 7, 7\) with 5x5 windows: \(9, 75\)",
         r"\(10, 3, 7, 7\) with 5x5 windows: \(90, 75\)",
         r"conv2d: \(1, 5, 15, 15\) -> \(1, 8, 15, 15\)", r"direct sum at one position: True",
         r"L\.Conv2d\(16, 3\): output \(1, 16, 15, 15\)  weight \(16, 5, 3, 3\)"],
    58: [r"(?s)skipped the pretrained run: (Pillow is not installed"
         r"|these files are missing.*vgg16\.npz.*zebra\.jpg)",
         r"input \(1, 3, 32, 32\) -> output \(1, 1000\)"],
    59: [between(rf"prediction of cos: mean squared error {NUMBER}", 0.0, 0.01), PLOT],
    60: [r"one batch: x \(30, 1\), t \(30, 1\)",
         between(rf"prediction of cos: mean squared error {NUMBER}", 0.0, 0.01), PLOT],
    # Trace mode: recording, the static graph, replay, passes, fusion, kernels, files.
    61: [r"t0: float32\[2, 2\] = matmul\(x, W\)", r"-- backward of tanh",
         r"k0: float32\[\] = const 1\.0", r"the tracer saw 11 Function calls",
         r"same result without a tracer: True"],
    62: [r"call 3: eager \S+ +traced \S+ +graph replayed", r"same result at every call: True",
         r"same total: True",
         r"trace accumulate\(x: f32\[3\]\) captures scale: f32\[\], total: f32\[3\]",
         r"total <- \w+", r"nodes by kind: input 1, state 2, const 1, op 5, write 1"],
    63: [r"def loss_and_grads\(x, t\):", r"W1 = _s_W1\._data", r"same gradient: True",
         between(rf"replay is {NUMBER}x as fast", 0.0, 1e3)],
    64: [r"after dce \(6 ops, 2 consts -> 5 ops", r"after cse \(5 ops, 2 consts -> 4 ops",
         r"after fold \(4 ops, 2 consts -> 3 ops, 3 consts\)", r"h: f32\[\] = const 6\.",
         r"same result as eager: True"],
    65: [r"(?m)^trace train_step: first call", r"graphs recorded: 1",
         r"the same loss: True",
         r"captures .*lr: f32\[\]", r"W <- \w+"],
    66: [r"50 ops, 45 of them elementwise, in 3 kernels",
         r"k2_0: 12 ops, shape \(4, 3\)", r"k2_1: 12 ops, shape \(3,\)",
         r"kernel k2: horizontal, 2 x 12 ops over \[4,3\], \[3\]",
         r"boundary \w+: f32\[4,3\] = matmul", GRAPH],
    67: [r"const float f = tanh\(e\);", r"extern \"C\" int k0\(",
         r"library \w+\.so: compiled in", r"fused kernel equals numpy: True",
         between(rf"replay fused \(cpu\) +{NUMBER}", 0.0, 1e3),
         # Timings on a shared machine: printed, their size not asserted.
         between(rf"fused kernel is {NUMBER}x as fast as numpy", 0.0, 1e3)],
    68: [r"// in_params:  float32 x, float32 a, float32 b",
         r"const float f = tanh\(e\);",
         r"GPU: fused replay equals numpy eager: True" if GPU else r"GPU: skipped"],
    69: [r"saved train_step\.json \(\d+ nodes\) and train_step\.npz \(.*state/model_l0_W",
         r"loaded: train_step inputs \['xb', 'tb'\] state \['model\.l0\.W', "
         r"'model\.l0\.b', 'model\.l1\.W', 'model\.l1\.b', 'optimizer\.lr'\]",
         between(rf"elsewhere, 200 more steps: loss {NUMBER}", 0.0, 1.0)],
    70: [r"TraceError: float\(\) of a traced array in clipped_loss \(step70\.py:\d+",
         r"fix: ", r"as ops: 1\.8909 .*replayed on a small x: 1\.1818",
         r"graphs: 2", r"retrace predict: x shape \(4, 3\) -> \(2, 3\)",
         r"retrace predict: x dtype float32 -> float64",
         r"retrace predict: net\.fc was replaced or removed", r"graphs kept: 1"],
    # Run alone (a world of one); tests/test_distributed_mpi.py runs it on two ranks.
    71: [r"a world of 1 rank", between(rf"epoch 300: loss {NUMBER}", 0.0, 0.2),
         between(rf"accuracy on the whole set: {NUMBER}", 0.9, 1.0),
         r"ranks hold equal parameters: True",
         r"\n  \w+: f32\[2,10\], \w+: f32\[10\], \w+: f32\[10,3\], \w+: f32\[3\] = "
         r"allreduce\(\w+, \w+, \w+, \w+\) \[comm='world', op='mean'\]\n", GRAPH],
    # Transformers: attention, layer norm and GELU, a block, a GPT trained, traced.
    72: [r"rows sum to 1: True; above the diagonal all 0: True",
         r"the same as F\.scaled_dot_product_attention: True",
         between(rf"accuracy of the previous token \(positions 1-7\): {NUMBER}", 0.95, 1.0),
         between(rf"mean weight on the position one back: {NUMBER}", 0.8, 1.0), PLOT],
    73: [r"layer_norm equals F\.layer_norm: True",
         r"gradient_check of layer_norm: +x True, gamma True, beta True",
         r"the same gradients as F\.layer_norm: True",
         r"gelu equals F\.gelu\(x, approximate='tanh'\): True",
         near(rf"from the exact \(erf\) form by {NUMBER}", 4.7e-4, 1e-5),
         r"gradient_check of gelu: True",
         r"second derivative by backprop equals the numerical one: True", PLOT],
    74: [r"TransformerBlock  \(3,280 parameters\)", r"the same as L\.TransformerBlock: True",
         r"positions 0-4 unchanged by a new last input: True; the last changed: True",
         between(rf"with residuals: gradient norm \S+ at the top, {NUMBER} at the input", 10, 1e3),
         between(rf"without them +: gradient norm \S+ at the top, {NUMBER} at the input", 0, 5)],
    # Short under QUICK (DEZERO_STEPS_QUICK=1, set by run_step): 60 steps of a small GPT.
    75: [near(rf"iter +0: train loss {NUMBER}", np.log(95), 0.3),
         between(rf"iter +60: train loss \S+, val loss {NUMBER}", 0.0, 3.5),
         r"generated sample \(temperature 0\.8\), from 'def ':\n-+\ndef ", PLOT],
    76: [r"the graph: \d+ nodes: input 2, state \d+", r"in \d+ kernels",
         r"= split\(\w+\) \[axis=2", r"kernel k0: \d+ ops, reduces axes \(2,\)",
         r"const float \w+ = tanh\(\w+\);", r"DEZERO_FOR_EACH_ELEMENT",
         # Timings on a shared machine: printed, their size not asserted.
         between(rf"replayed fused \(cpu\) +{NUMBER} ms a step", 0.0, 1e5),
         r"the replays give eager's losses \(to float32 rounding\): True"],
    77: [r"batch of 100: probabilities \(100, 3\), graphs kept: 1",
         r"trace <lambda>\(x: f32\[B,2\]\) where B >= 2",
         r"size_number\(x\) \[dtype='float32', value=B\]",
         r"replayed on 9 rows, equal to numpy: True",
         r"retrace scaled: sizes \{'B': 3, 'T': 2\} break B > 4",
         r"a graph where B >= 2, T >= 2, B > 4", r"a graph where B >= 2, T >= 2, B <= 4",
         r"retrace <lambda>: sizes \{'B': 1\} break B >= 2", r"graphs of predict: 2",
         r"C\+\+ of the kernel: const npy_intp _K = _S\[1\], _R = _S\[0\];",
         r"the kernel on 13 rows equals numpy: True"],
    78: [r"a graph per shape \(dynamic=False\): 8 graphs kept",
         r"warning: step has been traced 8 times \(the limit, max_entries\)",
         r"automatic dynamic \(the default\): 2 graphs kept",
         r"the same training either way \(to float32 rounding\): True",
         r"recorded: x shape \(30, 2\) -> \(17, 2\); symbolic: x axis 0 is B, t axis 0 is B",
         r"f32\[B,2\] is the input of the graph that serves them all",
         r"the traced forward gives eager's tokens: True; graphs recorded: 2",
         r"the symbolic graph takes i64\[1,T\]"],
    79: [r"f\(a=2, b=3\) = 7\.0", r"float\(d\): float\(\) of a value computed from placeholder a",
         r"compiled\(x: f32\[B,3\], w: f32\[3,2\]\)", r"B = 5: y has shape \(5, 2\)",
         r"a graph of a \(200000, 200000\) matmul defined in [0-9.]+ ms: f32\[200000\]",
         between(rf"loss: first \S+, last {NUMBER}", 0.0, 0.3),
         r"no array for input x \(f32\[B,2\]\)", r"input x must be f32\[B,2\], got f32\[16,3\]",
         r"loaded back: \[\[1\.0, 3\.0, 5\.0\], \[7\.0, 9\.0, 11\.0\]\]"],
}


# =============================================================================
# Harness: run_step, check_output, test_step
# =============================================================================
# Downloads go to a closed local port and fail at once, so the steps take their
# offline paths even on a machine with a network.
NO_NETWORK = {name: "http://127.0.0.1:9" for name in
              ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
NO_NETWORK.update(no_proxy="", NO_PROXY="")


def run_step(path, workdir, python=sys.executable, **env_changes):
    env = dict(os.environ)
    env["DEZERO_CACHE_DIR"] = str(workdir / "dezero_cache")
    env["DEZERO_STEPS_QUICK"] = "1"   # steps that train for minutes by hand take seconds
    # The steps run side by side, one a core (step_runs): BLAS on one thread in each,
    # else each process's BLAS threads wait spinning on the cores the others need.
    for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(name, "1")
    env.update(NO_NETWORK)
    env.update(env_changes)
    return subprocess.run([python, str(path)], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=120)


def check_output(number, stdout):
    for check in CHECKS.get(number, []):
        if isinstance(check, str):
            assert re.search(check, stdout), f"step {number}: no match for {check!r}"
            continue
        pattern, low, high = check
        match = re.search(pattern, stdout)
        assert match, f"step {number}: no match for {pattern!r}"
        value = float(match.group(1))
        assert low <= value <= high, (
            f"step {number}: {pattern!r} gave {value}, expected it in [{low}, {high}]")


@pytest.fixture(scope="module")
def step_runs(request, tmp_path_factory):
    """path -> the future run_step of each step this session tests, each in a working
    directory of its own, as many at once as the machine has cores (in the tests'
    order): the suite waits for one interpreter at a time no longer."""
    paths = [item.callspec.params["path"] for item in request.session.items
             if item.parent is request.node and item.originalname == "test_step"]
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        yield {path: pool.submit(run_step, path, tmp_path_factory.mktemp(path.stem))
               for path in paths}
        pool.shutdown(cancel_futures=True)  # those not started, after a stop at a failure


@pytest.mark.parametrize("path", STEP_FILES, ids=[p.stem for p in STEP_FILES])
def test_step(path, step_runs):
    number = int(path.stem[len("step"):])
    result = step_runs[path].result()
    assert result.returncode == 0, (
        f"{path.name} exited with {result.returncode}\n{result.stdout}\n{result.stderr}")
    assert "Traceback" not in result.stderr, result.stderr
    check_output(number, result.stdout)


def test_the_path_is_complete_and_every_step_has_checks():
    numbers = {int(p.stem[len("step"):]) for p in STEP_FILES}
    expected = set(range(1, 80))
    assert numbers == expected, f"missing steps: {sorted(expected - numbers)}"
    assert numbers == set(CHECKS)


# =============================================================================
# Missing tools: drawing and plotting steps say what they skipped
# =============================================================================
@pytest.mark.parametrize("number, picture", [
    (25, "sample.png"), (26, "goldstein.png"), (27, "my_sin_threshold_0.0001.png"),
    (31, "sin_backward_graph.png"), (35, "tanh_order1.png"), (45, "two_layer_net.png"),
    (66, "fused_step.png")])
def test_drawing_step_without_graphviz_skips_aloud(tmp_path, number, picture):
    empty = tmp_path / "no_tools"  # a PATH where no `dot` can be found
    empty.mkdir()
    # A venv that sees this environment's packages but not their commands: dezero
    # looks for graphviz-pure beside the interpreter too.
    venv.create(tmp_path / "venv", system_site_packages=True, symlinks=True, with_pip=False)
    python = str(tmp_path / "venv" / ("Scripts" if os.name == "nt" else "bin") / "python")
    result = run_step(ROOT / "steps" / f"step{number:02d}.py", tmp_path, python=python,
                      PATH=str(empty))
    assert result.returncode == 0, result.stderr
    assert f"skipped drawing {picture}" in result.stdout
    assert not (tmp_path / picture).exists()


def test_plotting_step_without_matplotlib_skips_aloud(tmp_path):
    # A package that fails to import stands in for an uninstalled matplotlib.
    stub = tmp_path / "stub" / "matplotlib"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError('matplotlib hidden by the test')\n")
    result = run_step(ROOT / "steps" / "step34.py", tmp_path, PYTHONPATH=str(stub.parent))
    assert result.returncode == 0, result.stderr
    assert "skipped plots: matplotlib is not installed" in result.stdout


# =============================================================================
# Real data: with MNIST's files in the cache, step 51 trains on them
# =============================================================================
def write_idx_gz(path, array):
    """Write uint8 `array` as a gzipped idx file, MNIST's format."""
    header = bytes([0, 0, 0x08, array.ndim]) + b"".join(
        int(n).to_bytes(4, "big") for n in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_mnist_step_reads_mnist_files_from_the_cache(tmp_path):
    cache = tmp_path / "dezero_cache"
    cache.mkdir()
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 300), ("t10k", 100)):
        write_idx_gz(cache / f"{prefix}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        write_idx_gz(cache / f"{prefix}-labels-idx1-ubyte.gz", rng.integers(0, 10, n))
    # The small files are stand-ins: the cache is trusted as it is.
    result = run_step(ROOT / "steps" / "step51.py", tmp_path, DEZERO_TRUST_CACHE="1")
    assert result.returncode == 0, result.stderr
    assert "stand-in" not in result.stdout
    assert "MNIST: 300 train, 100 test examples; x (784,) float32" in result.stdout
