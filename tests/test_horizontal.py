"""Horizontal fusion (dezero/static/horizontal.py): an optimizer's updates of every
parameter run as one kernel over a list of arrays, on the CPU one C function that
runs each segment's loop in turn; its results equal the interpreter's bit for bit."""
import numpy as np
import pytest
from fusion_helpers import cpu_factories, reference_factory
from train_helpers import training_step

import dezero
from dezero import models, optimizers
from dezero.kernels import cpu
from dezero.kernels.codegen import kernel_spec
from dezero.static.backends.pycode import Compiled

needs_compiler = pytest.mark.skipif(cpu.missing_reason() is not None,
                                    reason=str(cpu.missing_reason()))
OPTIMIZERS = {"SGD": lambda: optimizers.SGD(0.1), "MomentumSGD": optimizers.MomentumSGD,
              "Adam": lambda: optimizers.Adam(0.01), "AdaGrad": optimizers.AdaGrad,
              "AdamW": lambda: optimizers.AdamW(0.01, weight_decay=0.1)}


def traced_step(make_optimizer, sizes=(10, 3)):
    """The spiral step (MLP, sigmoid, softmax cross-entropy) traced on 30 examples."""
    x, t = dezero.datasets.get_spiral(train=True)
    np.random.seed(0)
    model = models.MLP(sizes)
    traced = training_step(model, make_optimizer().setup(model), traced=True)
    traced(x[:30], t[:30])
    return traced.graph, model


def update_kernel(graph):
    group, = [g for g in graph.groups if g.segments]
    return group


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_an_optimizers_updates_are_one_horizontal_kernel(name):
    graph, model = traced_step(OPTIMIZERS[name])
    group = update_kernel(graph)
    assert [s.shape for s in group.segments] == [p.shape for p in model.params()]
    assert len({len(s.nodes) for s in group.segments}) == 1  # one body for each
    assert group.compiled  # merged, the updates pay for a kernel call
    assert str(graph).count("horizontal") == 1


def test_the_spiral_adam_step_has_at_most_five_kernels():
    graph, _ = traced_step(lambda: optimizers.Adam(0.01))
    assert len(graph.groups) <= 5


def random_inputs(group, seed, strided=False):
    """Arrays in [0.5, 1) for a group's inputs (square roots, divisions stay finite);
    strided: each array of two or more elements a view with a stride of two."""
    rng = np.random.default_rng(seed)
    arrays = []
    for v in group.inputs:
        a = np.asarray(rng.random(v.shape) * 0.5 + 0.5, v.dtype)
        if strided and a.size > 1:
            a = np.repeat(a, 2, axis=-1)[..., ::2]
        arrays.append(a)
    return arrays


@pytest.fixture(scope="module")
def compiled_steps():
    """name -> (the optimizer's traced spiral step, factory(group) -> the cpu kernel of
    its update_kernel), the updates of all the optimizers compiled together."""
    graphs = {name: traced_step(make)[0] for name, make in OPTIMIZERS.items()}
    factories = cpu_factories(list(graphs.values()), lambda group: group.segments)
    return dict(zip(graphs, zip(graphs.values(), factories)))


@needs_compiler
@pytest.mark.parametrize("name", OPTIMIZERS)
@pytest.mark.parametrize("strided", [False, True])
def test_the_compiled_kernel_equals_the_interpreter_bit_for_bit(name, strided,
                                                                compiled_steps):
    graph, factory = compiled_steps[name]
    group = update_kernel(graph)
    kernel = factory(group)
    reference = reference_factory(graph)(group)  # each node's forward
    for seed in range(3):
        arrays = random_inputs(group, seed, strided)
        got, want = kernel(*arrays), reference(*arrays)
        assert [a.shape for a in got] == [v.shape for v in group.outputs]
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


@needs_compiler
def test_one_c_function_runs_the_segments_each_loop_compiled_once_per_shape():
    graph, _ = traced_step(lambda: optimizers.Adam(0.01), sizes=(10, 10, 3))
    group = update_kernel(graph)
    source = cpu.library_source([kernel_spec(group)])
    names = [s.name for s in group.segments]
    assert [s.shape for s in group.segments] == [(2, 10), (10,), (10, 10), (10,), (10, 3),
                                                 (3,)]
    driver = source[source.index(f'extern "C" int {group.name}('):]
    assert [n for n in names if f"{n}(" in driver] == names  # called in turn
    # the second bias (10,) is the first one's loop: a one-line call of it
    assert f'int {names[3]}(' in source and f'{{ return {names[1]}(' in source


@needs_compiler
def test_a_refused_input_of_a_later_segment_is_converted_and_named(monkeypatch):
    graph, _ = traced_step(lambda: optimizers.SGD(0.1))
    group = update_kernel(graph)
    kernel = graph.compile("cpu").wait().library.kernel(kernel_spec(group))
    arrays = random_inputs(group, 0)
    want = kernel(*arrays)
    last = len(arrays) - 1  # the last parameter's, read by the last segment only
    swapped = arrays[:last] + [arrays[last].astype(">f4")]  # big-endian: converted
    for a, b in zip(kernel(*swapped), want):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match=f"kernel {group.name}: input "
                                        f"{group.inputs[last].name} is float64"):
        kernel(*arrays[:last], arrays[last].astype(np.float64))


def test_training_with_horizontal_kernels_replays_like_eager():
    """Three backends, five steps each, against eager code: the same losses and weights
    (the python backend and the interpreter bit for bit)."""
    x, t = dezero.datasets.get_spiral(train=True)
    runs = {}
    for backend in ("eager", "interpreter", "python"):
        np.random.seed(0)
        model = models.MLP((10, 3))
        optimizer = optimizers.Adam(0.01).setup(model)
        run = training_step(model, optimizer, traced=backend != "eager")
        losses = []
        for k in range(5):
            batch = slice(30 * k, 30 * k + 30)
            if backend != "eager" and k == 1:
                run = run.graph.compile(backend)
            losses.append(run(x[batch], t[batch]).data)
        runs[backend] = losses + [p.data for p in model.params()]
    for backend in ("interpreter", "python"):
        for a, b in zip(runs[backend], runs["eager"]):
            np.testing.assert_array_equal(a, b)
    graph, _ = traced_step(lambda: optimizers.Adam(0.01))
    group = update_kernel(graph)
    plan = Compiled(graph, reference_factory(graph))  # the kernel line of the replay code
    assert f"= _{group.name}(" in plan.source


def test_the_drawing_frames_a_horizontal_kernel_around_its_segments():
    graph, _ = traced_step(lambda: optimizers.SGD(0.1))
    group = update_kernel(graph)
    dot = graph.to_dot()
    frame = dot[dot.index(f"subgraph cluster_{group.name} {{"):]
    assert frame.startswith(f'subgraph cluster_{group.name} {{ label="{group.name}: '
                            f'horizontal"; style="rounded,bold";')
    frame = frame[:frame.index("\n")]
    assert [f"subgraph cluster_{s.name} {{" in frame for s in group.segments] == [True] * 4
    assert frame.count("subgraph") == 5  # one frame, a dotted cluster per segment
