"""`python -m dezero demo`: trains the spiral network, prints accuracy and timings,
writes the graph files; unknown commands exit with status 2 and the usage."""
import os
import pathlib
import re
import subprocess
import sys
import time

import pytest

import dezero
from dezero import demo
from dezero.kernels import cpu
from dezero.utils import find_dot

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_cli(*args, cwd):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    return subprocess.run([sys.executable, "-m", "dezero", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def test_demo_trains_and_writes_the_graphs_into_the_default_folder(tmp_path):
    result = run_cli("demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "dezero-demo"
    accuracies = re.findall(r"^eager.* train accuracy (\d\.\d+)", result.stdout, re.M)
    assert len(accuracies) == 1 and float(accuracies[0]) > 0.9, result.stdout
    dynamic = (out / "dynamic_graph.dot").read_text(encoding="utf-8")
    assert dynamic.startswith("digraph") and "SoftmaxCrossEntropy" in dynamic
    assert (out / "dynamic_graph.svg").exists() == (find_dot() is not None)
    if hasattr(dezero, "trace"):
        traced = re.findall(r"^traced.* train accuracy (\d\.\d+)", result.stdout, re.M)
        assert len(traced) == 1 and float(traced[0]) > 0.9, result.stdout
        fused = re.findall(r"^fused .* train accuracy (\d\.\d+).*\(replayed with (\d+) of its "
                           r"(\d+) fused groups as compiled C\+\+ kernels\)", result.stdout, re.M)
        if cpu.missing_reason() is None:  # else the fused run replays unfused, and says so
            # The same training; the bias add with the sigmoid, the loss with its
            # gradient (one reduction kernel), the sigmoid's backward with b's
            # gradient (4 ops and a sum), Adam's 12-op step size and its update of
            # every parameter (one horizontal kernel), all compiled (DEZERO_KERNELS
            # is always in the tests: measured, the small ones may run as numpy calls).
            assert fused == [(traced[0], "5", "5")], result.stdout
        assert "fused / eager:" in result.stdout
        static = (out / "static_graph.dot").read_text(encoding="utf-8")
        fused = (out / "fused_kernels.dot").read_text(encoding="utf-8")
        assert static.startswith("digraph") and "cluster_k0" not in static
        assert "subgraph cluster_k0" in fused
        assert (out / "fused_kernels.svg").exists() == (find_dot() is not None)
    else:
        assert "traced: skipped" in result.stdout


def test_demo_out_option_names_the_folder(tmp_path):
    result = run_cli("demo", "--epochs", "2", "--out", "graphs/run1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "graphs" / "run1" / "dynamic_graph.dot").exists()
    assert not (tmp_path / "dezero-demo").exists()


def test_unknown_or_missing_command_prints_usage_and_exits_2(tmp_path):
    for args in (("fly",), ()):
        result = run_cli(*args, cwd=tmp_path)
        assert result.returncode == 2
        assert "usage: python -m dezero" in result.stderr
        assert "demo" in result.stderr


def test_progress_falls_back_to_plain_lines_without_tqdm(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # makes `import tqdm` fail
    with demo._progress(20, "eager") as progress:
        for epoch in range(20):
            progress(1.0 / (epoch + 1))
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "  eager epoch 2/20  loss 0.5000"
    assert lines[-1] == "  eager epoch 20/20  loss 0.0500"
    assert len(lines) == 10


def test_demo_leaves_the_global_random_state_alone():
    import numpy as np
    before = np.random.get_state()[1].copy()
    with demo._seeded(3):
        np.random.rand()
    np.testing.assert_array_equal(np.random.get_state()[1], before)


def _demo_args(tmp_path, epochs):
    return demo.build_parser().parse_args(["--epochs", str(epochs), "--out", str(tmp_path)])


def test_the_time_of_compiling_is_reported_alone_not_in_the_fused_row(
        tmp_path, monkeypatch, capsys):
    if cpu.missing_reason() is not None:
        pytest.skip(cpu.missing_reason())
    build = cpu.build_library

    def slow_build(*args):  # a cold cache on a loaded machine: compiling takes long
        time.sleep(1.5)
        return build(*args)

    monkeypatch.setattr(cpu, "build_library", slow_build)
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path / "empty-cache"))
    assert demo.main(_demo_args(tmp_path, 2)) == 0
    out = capsys.readouterr().out
    seconds = dict(re.findall(r"^(eager|traced|fused) *: +(\d+\.\d+) s", out, re.M))
    assert float(seconds["fused"]) < 1.0, out  # 19 replayed steps, without the compile
    compiled = re.search(r"^first call of the traced step, once: recording \d+\.\d+ s; 5 C\+\+ "
                         r"kernels compiled in (\d+\.\d+) s", out, re.M)
    assert compiled and float(compiled.group(1)) >= 1.5, out


def test_a_cold_kernel_cache_gives_the_ratios_of_a_warm_one(tmp_path, monkeypatch):
    if cpu.missing_reason() is not None:
        pytest.skip(cpu.missing_reason())
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path / "empty-cache"))
    outputs = [run_cli("demo", "--epochs", "30", cwd=tmp_path).stdout for _ in range(2)]
    assert "5 C++ kernels compiled in" in outputs[0], outputs[0]
    assert "5 C++ kernels loaded from the kernel cache" in outputs[1], outputs[1]
    for out in outputs:
        ratios = re.search(r"^traced / eager: (\d+\.\d)x as fast; fused / eager: "
                           r"(\d+\.\d)x as fast$", out, re.M)
        assert ratios and float(ratios.group(1)) > 1 and float(ratios.group(2)) > 1, out
