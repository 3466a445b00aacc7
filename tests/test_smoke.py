"""The tour: the README example, end to end."""
import re
from pathlib import Path

import numpy as np

import dezero.functions as F
from dezero import Variable


def test_readme_example_gradient_and_second_derivative():
    x = Variable(np.array(2.0))
    y = x ** 3 + 2 * x - 1 / x
    y.backward(create_graph=True)
    assert np.isclose(y.data, 11.5)
    assert np.isclose(x.grad.data, 14.25)  # 3x^2 + 2 + 1/x^2
    gx = x.grad
    x.cleargrad()
    gx.backward()
    assert np.isclose(x.grad.data, 11.75)  # 6x - 2/x^3


def test_tanh_chain_backward_matches_closed_form():
    x = Variable(np.linspace(-1, 1, 5))
    y = F.sum(F.tanh(x))
    y.backward()
    np.testing.assert_allclose(x.grad.data, 1 - np.tanh(x.data) ** 2)


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    import re
    from pathlib import Path

    import pytest

    from dezero.utils import find_dot
    if find_dot() is None:
        pytest.skip("the README draws graphs, and no dot renderer is installed")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})
    assert (tmp_path / "y.png").stat().st_size > 0
    assert (tmp_path / "step.svg").read_text().lstrip().startswith("<")


def test_readme_time_claims_say_where_they_were_measured():
    # A duration in the README's prose ("runs in about 15 s") is a measurement:
    # its paragraph says it was measured and on what machine.
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", readme, flags=re.M | re.S)
    duration = re.compile(r"\b(a minute|\d+(\.\d+)? ?(s|min|ms|us)|"
                          r"\d+(\.\d+)? (seconds|minutes))\b")
    unmeasured = [paragraph for paragraph in prose.split("\n\n")
                  if duration.search(paragraph) and not re.search(
                      r"measured on .*(machine|computer)", paragraph, re.S)]
    assert unmeasured == []
    code_times = re.findall(r"#.*\b\d+ us\b.*", readme)
    assert code_times and "measured on" in readme.split(code_times[0])[1].split("\n\n")[1]
