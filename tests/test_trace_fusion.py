"""Fusion: passes.fuse groups elementwise nodes into kernels, codegen.kernel_spec writes
their C++ bodies, and the replay code calls one kernel per group."""
import numpy as np
import pytest
from backend_helpers import assert_within_ulps
from fusion_helpers import reference_factory

import dezero
import dezero.functions as F
from dezero import Variable, models, optimizers
from dezero.kernels.codegen import KernelSpec, Param, c_literal, kernel_spec
from dezero.static import backends, passes
from dezero.static.backends.pycode import Compiled
from dezero.static.ir import GraphError, Group, row_shapes

# =============================================================================
# Graphs with known kernels: the tanh chain, a sigmoid MLP step, an Adam step
# =============================================================================


def chain(x):  # benchmarks/bench_trace.py's chain
    y = x * 0.5 + 1.0
    y = F.exp(-(y * y))
    y = F.tanh(y * x - 0.25)
    return y + x


def training_step(model, optimizer):
    optimizer.setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def classification_calls(n=4, batch=8, dim=4, classes=3):
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((batch, dim)).astype(np.float32),
             rng.integers(0, classes, batch)) for _ in range(n)]


def traced_step(make_optimizer, calls):
    """(graph, model) of a sigmoid MLP (10, 3) training step, traced and replayed."""
    model = models.MLP((10, 3))
    traced = dezero.trace(training_step(model, make_optimizer()))
    for x, t in calls[:2]:
        traced(x, t)
    return traced.graph, model


def kernel_sizes(graph):
    return [len(g.nodes) for g in graph.groups]


def test_the_tanh_chain_is_one_kernel():
    graph = dezero.trace(chain).lower(np.ones(10, np.float32))
    group, = graph.groups
    assert (group.name, group.shape, len(group.nodes)) == ("k0", (10,), 9)
    assert [v.name for v in group.inputs] == ["x", "a", "b", "c"]  # x and 3 constants
    assert [v.name for v in group.outputs] == ["l"]
    assert "  # kernel k0: 9 ops -> l\n    d: f32[10] = mul(x, a)\n" in str(graph)
    assert str(graph).endswith("\n    l: f32[10] = add(k, x)\n  return l")


def test_a_sigmoid_mlp_sgd_steps_updates_are_one_horizontal_kernel():
    graph, _ = traced_step(lambda: optimizers.SGD(0.1), classification_calls())
    # the bias add with the sigmoid; the second bias add with the loss (its softmax,
    # the pick of each label, the mean) and the loss's gradient; the backward of the
    # sigmoid (gy * y * (1 - y)) with the sum of it for b's gradient; then the update
    # (lr * grad, param - that) of every parameter in one kernel
    assert kernel_sizes(graph) == [2, 13, 4, 8]
    # only y leaves the forward's kernel: 1 - y is computed in the backward's
    assert [v.name for v in graph.groups[0].outputs] == ["e"]
    update = graph.groups[3]
    assert [s.shape for s in update.segments] == [(4, 10), (10,), (10, 3), (3,)]
    assert [s.name for s in update.segments] == ["k3_0", "k3_1", "k3_2", "k3_3"]
    assert update.shape == (40 + 10 + 30 + 3,)
    assert "  # kernel k3: horizontal, 4 x 2 ops over [4,10], [10], [10,3], [3]\n" \
           "    # k3_0: f32[4,10] -> bh\n" in str(graph)


def test_an_adam_step_has_one_scalar_kernel_and_one_horizontal_update_kernel():
    graph, _ = traced_step(lambda: optimizers.Adam(0.01), classification_calls())
    assert kernel_sizes(graph) == [2, 13, 4, 12, 48]
    scalars = graph.groups[3]  # the step count and the bias-corrected step size
    assert scalars.shape == () and len(scalars.outputs) == 2 and not scalars.segments
    update = graph.groups[4]
    assert len(update.segments) == 4 and len(update.outputs) == 12
    for segment in update.segments:  # m, v and the parameter are written back
        assert len(segment.nodes) == 12 and len(segment.outputs) == 3


def test_the_adam_update_of_one_parameter_is_one_readable_segment():
    graph, _ = traced_step(lambda: optimizers.Adam(0.01), classification_calls())
    spec = kernel_spec(graph.groups[4])
    assert [s.name for s in spec.segments] == ["k4_0", "k4_1", "k4_2", "k4_3"]
    assert spec.body == "// kernel k4: horizontal over k4_0, k4_1, k4_2, k4_3\n"
    first = spec.segments[0]
    # the gradient u, the slots m and v (named by where they live), 1 - beta1, 1 - beta2,
    # the step size, eps and the parameter
    assert [p.name for p in first.inputs] == [
        "be", "optimizer_ms_l0_W", "bs", "optimizer_vs_l0_W", "bt", "br",
        "optimizer_eps", "model_l0_W"]
    assert [p.name for p in first.outputs] == ["bw", "ca", "cf"]  # new m, v and W
    assert first.body == (
        "// kernel k4_0: sub, mul, add, mul, sub, mul, add, mul, sqrt, add, div, sub\n"
        "const float bu = be - optimizer_ms_l0_W;\n"
        "const float bv = bs * bu;\n"
        "const float bw_ = optimizer_ms_l0_W + bv;\n"
        "const float bx = be * be;\n"
        "const float by = bx - optimizer_vs_l0_W;\n"
        "const float bz = bt * by;\n"
        "const float ca_ = optimizer_vs_l0_W + bz;\n"
        "const float cb = br * bw_;\n"
        "const float cc = sqrt(ca_);\n"
        "const float cd = cc + optimizer_eps;\n"
        "const float ce = cb / cd;\n"
        "const float cf_ = model_l0_W - ce;\n"
        "bw = bw_;\n"
        "ca = ca_;\n"
        "cf = cf_;\n")
    # the kernel's params: every segment's, each once (the 4 shared scalars too)
    assert [p.name for p in spec.inputs][:8] == [p.name for p in first.inputs]
    assert len(spec.inputs) == 8 + 3 * 4 and [p.name for p in spec.outputs] == [
        p.name for s in spec.segments for p in s.outputs]


# ---- matmul epilogues: the bias add and the activation after the BLAS call --------


def dense_layers(activation, seed=0):
    """A traced function: the sum of squares of activation(x @ W1 + b1) @ W2, with
    its backward (the gradient reaching the activation comes from a matmul)."""
    rng = np.random.default_rng(seed)
    W1, W2 = (Variable(rng.standard_normal(s).astype(np.float32), name=n)
              for s, n in (((4, 6), "W1"), ((6, 3), "W2")))
    b1 = Variable(rng.standard_normal(6).astype(np.float32), name="b1")

    def f(x):
        y = F.linear(activation(F.linear(x, W1, b1)), W2)
        loss = F.sum(y * y)
        for p in (W1, b1, W2):
            p.cleargrad()
        loss.backward()
        return loss
    return dezero.trace(f), (W1, b1, W2)


def kernel_ops(graph):
    return [[n.op for n in g.nodes] for g in graph.groups]


@pytest.mark.parametrize("activation, forward, backward", [
    # the backward sums the gradient for b1 in its loop
    (F.relu, ["add", "relu"], ["positive", "mul", "sum_to"]),
    (F.sigmoid, ["add", "sigmoid"], ["mul", "sub", "mul", "sum_to"])])
def test_a_dense_layer_is_one_blas_call_and_one_kernel_each_way(activation, forward,
                                                               backward):
    traced, _ = dense_layers(activation)
    graph = traced.lower(np.ones((5, 4), np.float32))
    # between them the loss, sum(y * y), one reduction kernel
    assert kernel_ops(graph) == [forward, ["mul", "sum"], backward]
    lines = str(graph).splitlines()
    # forward: x @ W1 (BLAS), then one kernel: + b1, the activation; it stores y only
    k0 = graph.groups[0]
    xw, (y,) = k0.nodes[0].inputs[0].name, k0.outputs
    start = lines.index(f"  # {k0.header()}")
    assert lines[start - 1] == f"  {xw}: f32[5,6] = linear(x, W1)"
    assert lines[start + 1:start + 3] == [
        f"    {k0.nodes[0].outputs[0].name}: f32[5,6] = add({xw}, b1)",
        f"    {y.name}: f32[5,6] = {forward[1]}({k0.nodes[0].outputs[0].name})"]
    # backward: the gradient of y from a matmul, then one kernel applying the mask
    k2 = graph.groups[2]
    gy = next(v for v in k2.inputs if v.shape == (5, 6) and v is not y)
    made = next(n for n in graph.nodes if gy in n.outputs)
    assert made.op == "matmul" and [v.shape for v in k2.outputs][0] == (5, 6)
    # a kernel writes its result into the matmul's array, which only it reads (a
    # reduction's loop writes its own arrays)
    code = Compiled(graph, reference_factory(graph)).source
    assert f"    {y.name}, = _k0({xw}, b1, out=({xw},))  # kernel k0: 2 ops; {y.name} " \
           f"into {xw}'s array\n" in code
    assert code.count("'s array") == 1


def test_a_matmul_result_read_elsewhere_is_not_written_into():
    rng = np.random.default_rng(0)
    W = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)

    def f(x):
        h = F.matmul(x, W)
        return F.relu(h + b), h * 1.0  # h is returned too: a fresh array for y
    graph = dezero.trace(f).lower(np.ones((5, 4), np.float32))
    assert kernel_ops(graph) == [["add", "relu"]]
    code = Compiled(graph, reference_factory(graph)).source
    assert "out=" not in code


def test_an_epilogue_is_split_only_where_no_dtype_is_promoted():
    x = np.ones((5, 4), np.float32)
    W, b = np.ones((4, 6), np.float32), np.ones(6, np.float64)
    graph = dezero.trace(lambda x: F.relu(F.linear(x, W, b))).lower(x)
    assert [n.op for n in graph.of_kind("op")] == ["linear", "relu"]
    np.testing.assert_array_equal(graph.interpret(x).data, np.maximum(x @ W + b, 0))


def test_groups_are_consecutive_typed_and_checked():
    graph, _ = traced_step(lambda: optimizers.Adam(0.01), classification_calls())
    at = {id(n): i for i, n in enumerate(graph.nodes)}
    for k, group in enumerate(graph.groups):
        spots = [at[id(n)] for n in group.nodes]
        assert group.name == f"k{k}" and spots == list(range(spots[0], spots[0] + len(spots)))
        for part in group.segments or [group]:
            shapes = {part.shape} | (row_shapes(part.shape, part.axes) | {()}  # a total
                                     if part.axes else set())
            assert all(n.outputs[0].shape in shapes for n in part.nodes)
            for v in part.inputs:  # labels (integers) are read one a row
                assert v.dtype.kind == "i" or \
                    np.broadcast_shapes(v.shape, part.shape) == part.shape
    graph.check()
    broken = graph.with_nodes(graph.nodes)
    first = graph.groups[0]
    broken.groups = [Group("k0", first.nodes[::-1], first.inputs, first.outputs, first.shape)]
    with pytest.raises(GraphError, match="kernel k0 is not a run of consecutive nodes"):
        broken.check()
    update = graph.groups[4]  # segments out of order: not the group's nodes
    broken.groups = [Group("k4", update.nodes, update.inputs, update.outputs, update.shape,
                           segments=update.segments[::-1])]
    with pytest.raises(GraphError, match=r"kernel k4 is not a run of consecutive nodes of "
                                         r"the graph with results of shape \(3,\) or"):
        broken.check()


# =============================================================================
# The pass: boundaries, shapes, paths that leave a group, order
# =============================================================================


def fused(fn, *inputs):
    return dezero.trace(fn).lower(*inputs)


def test_a_node_that_needs_a_boundary_after_its_group_starts_another():
    x = np.arange(1.0, 7.0, dtype=np.float32)

    def f(x):
        y = F.exp(x) * 2.0
        s = F.reshape(F.sum(y), (1,))  # a boundary that reads the group ...
        z = F.tanh(y * s)  # ... and feeds this node: it cannot join y's group
        return F.sin(z)

    with dezero.static.debug(3):
        graph = fused(f, x)
    assert kernel_sizes(graph) == [3, 3]  # exp, mul and the sum over their result
    assert [n.op for n in graph.groups[1].nodes] == ["mul", "tanh", "sin"]


def test_fusion_decisions_are_logged_at_level_three(capsys):
    x = np.arange(1.0, 7.0, dtype=np.float32)
    with dezero.static.debug(3):
        fused(lambda x: F.sin(F.exp(x) * F.reshape(F.sum(F.exp(x) * 2.0), (1,))), x)
    err = capsys.readouterr().err
    assert "boundary " in err and "= reshape(" in err and "not elementwise" in err
    assert "starts a kernel: joining its inputs' would make a path leave" in err
    assert "f starts a kernel" in err  # final names
    assert "kernels of" in err


def test_broadcast_inputs_join_and_other_shapes_start_apart():
    W = Variable(np.ones((3, 4), np.float32), name="W")
    b = Variable(np.ones(4, np.float32), name="b")
    c = Variable(np.ones((3, 1), np.float32), name="c")
    s = Variable(np.array(2.0, np.float32), name="s")

    def f(x):
        scale = F.exp(s) + 1.0                   # shape (): its own group
        return F.tanh(x * W + b) * c * scale     # (3, 4): rows, columns and scalars join

    graph = fused(f, np.ones((3, 4), np.float32))
    assert [(g.shape, len(g.nodes)) for g in graph.groups] == [((), 2), ((3, 4), 5)]
    assert {v.name for v in graph.groups[1].inputs} >= {"W", "b", "c"}


def test_nodes_are_reordered_so_that_each_group_is_consecutive():
    W = Variable(np.ones((4, 4), np.float32), name="W")

    def f(x):
        y = F.exp(x)
        m = F.matmul(x, W)       # between y and its reader, independent of both
        return F.tanh(y) + F.sum(m)

    graph = fused(f, np.ones((2, 4), np.float32))
    # the matmul that add reads (through the sum, which joins the kernel) must run
    # first: it moves up
    assert [n.op for n in graph.of_kind("op")] == ["matmul", "exp", "tanh", "sum", "add"]
    assert [n.op for n in graph.groups[0].nodes] == ["exp", "tanh", "sum", "add"]
    graph.check()
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    # a tanh of at most 1 plus a sum of |m|: ulps of those (the kernel's tanh and order)
    scale = 1 + np.sum(np.abs(x @ W.data))
    assert_within_ulps(graph(x).data, f(x).data, scale)


def test_random_ops_integers_and_non_finite_attrs_stay_out_of_kernels(capsys):
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    with dezero.static.debug(3):
        graph = fused(lambda x: F.exp(F.dropout(F.sin(x) * 2.0)), x)
        clipped = fused(lambda x: F.exp(F.clip(F.sin(x), -1.0, np.inf)), x)
        ints = fused(lambda x: F.exp(F.exp(x)) * 2.0, np.arange(3))
    err = capsys.readouterr().err
    assert all(n.op != "dropout_mask" for g in graph.groups for n in g.nodes)
    assert "a random op" in err
    assert [n.op for g in clipped.groups for n in g.nodes] == []
    assert "attr x_max=inf is no finite float32 number" in err
    assert ints.groups[0].nodes[0].inputs[0].dtype == np.float64  # exp(int) stays apart
    assert "dtypes int64 -> float64" in err


def test_a_user_op_that_changes_forward_does_not_inherit_cpp():
    class Scale(F.Mul):
        def forward(self, x0, x1):
            return x0 * x1 + 1

    graph = fused(lambda x: F.exp(Scale()(F.sin(x), x)), np.ones(3, np.float32))
    assert graph.groups == []  # sin | scale (its own forward) | exp


def test_fuse_leaves_the_old_graph_as_it_was_and_the_loaded_graph_has_the_kernels(tmp_path):
    assert passes.PIPELINE[-1] is passes.fuse
    graph = fused(chain, np.ones(10, np.float32))
    unfused = graph.with_nodes(graph.nodes)
    again = passes.fuse(unfused)
    assert unfused.groups == [] and str(again) == str(graph)
    graph.save(str(tmp_path / "chain"))
    assert str(dezero.static.load(str(tmp_path / "chain.json"))) == str(graph)


def test_the_trace_log_counts_kernels(capsys):
    with dezero.static.debug(1):
        dezero.trace(chain)(np.ones(10, np.float32))
    assert "1 kernels;" in capsys.readouterr().err


def test_kernel_sources_are_logged_at_level_four(capsys, monkeypatch):
    monkeypatch.setattr(backends, "DEFAULT", "cpu")  # the backend that makes kernels
    with dezero.static.debug(4):
        dezero.trace(chain)(np.ones(10, np.float32))
    assert "kernel k0 of chain:\n// kernel k0: mul, add" in capsys.readouterr().err


def test_the_drawing_frames_each_kernel():
    dot = fused(chain, np.ones(10, np.float32)).to_dot()
    assert 'subgraph cluster_k0 { label="k0";' in dot and '"op4"; "op5";' in dot


# =============================================================================
# Kernel specs: the C++ body
# =============================================================================


def test_the_chain_kernel_body_binds_a_local_per_node_with_float_literals():
    graph = fused(chain, np.ones(10, np.float32))
    spec = kernel_spec(graph.groups[0])
    assert spec.inputs[:2] == (Param("x", "float", "float32", (10,)),
                               Param("a", "float", "float32", ()))
    assert spec.outputs == (Param("l", "float", "float32", (10,)),)
    assert spec.body == (
        "// kernel k0: mul, add, mul, neg, exp, mul, sub, tanh, add\n"
        "const float d = x * a;\n"
        "const float e = d + b;\n"
        "const float f = e * e;\n"
        "const float g = -f;\n"
        "const float h = exp(g);\n"
        "const float v_i = h * x;\n"  # i is cupy's loop index
        "const float j = v_i - c;\n"
        "const float k = tanh(j);\n"
        "const float l_ = k + x;\n"
        "l = l_;\n")


def test_the_same_graph_gives_the_same_bytes_and_key():
    specs = [kernel_spec(fused(chain, np.ones(10, np.float32)).groups[0]) for _ in range(2)]
    assert specs[0] == specs[1] and specs[0].key() == specs[1].key()
    assert len(specs[0].key()) == 64
    other = kernel_spec(fused(chain, np.ones(11, np.float32)).groups[0])
    assert other.key() != specs[0].key()  # the shape is part of the key


def test_float64_kernels_write_double_literals_and_attrs_in_the_kernel_type():
    def f(x):
        return F.leaky_relu(F.sigmoid(x) ** 3, slope=0.1) - 1

    spec = kernel_spec(fused(f, np.ones(5)).groups[0])
    assert spec.inputs[0].ctype == "double"
    assert "const double b = tanh(x * 0.5) * 0.5 + 0.5;" in spec.body
    assert "b * b * b;" in spec.body and "c * 0.1;" in spec.body
    spec32 = kernel_spec(fused(f, np.ones(5, np.float32)).groups[0])
    assert "b * b * b;" in spec32.body and "c * 0.1f;" in spec32.body


def test_a_constant_exponent_is_decided_when_the_kernel_is_written():
    # x ** 0.5 is sqrt and x ** 2 is x * x as numpy computes them (pow differs at -0.0
    # and -inf), a cube is products; any other exponent is pow; the body never tests
    # the constant at run time.
    def f(x):
        return F.exp(x ** 2) + F.exp(x ** 0.5) * F.exp(x ** -0.5) + x ** 3

    body = kernel_spec(fused(f, np.ones(5, np.float32)).groups[0]).body
    assert "= x * x;" in body and "sqrt(x)" in body and "pow(x, (-0.5f))" in body
    assert "= x * x * x;" in body
    assert "==" not in body and "?" not in body


def test_literals_of_each_type():
    assert c_literal(0.1, np.float32) == "0.1f" and c_literal(0.1, np.float64) == "0.1"
    assert c_literal(2, np.float32) == "2.0f" and c_literal(-0.25, np.float64) == "(-0.25)"
    assert c_literal(1e-8, np.float32) == "1e-08f"
    assert c_literal(1 / 3, np.float32) == "0.33333334f"  # the float32 the forward uses
    with pytest.raises(GraphError, match="no finite float32"):
        c_literal(1e39, np.float32)


def test_comparisons_are_cast_to_the_kernel_type():
    W = Variable(np.ones((4, 3), np.float32), name="W")

    def f(x):
        y = F.sum(F.relu(F.matmul(x, W)) * 2.0)
        y.backward()  # relu's backward: gy * (x > 0)
        return y

    graph = fused(f, np.ones((2, 4), np.float32))
    # relu's mask joins the sum's loop (a reduction kernel): its spec's text, whichever
    bodies = [repr(kernel_spec(g)) for g in graph.groups]
    assert any("= (float)(" in b and " > 0.0f);" in b for b in bodies), bodies


def test_names_that_are_cpp_words_or_math_functions_are_prefixed():
    do = Variable(np.ones(3, np.float32), name="do")
    exp = Variable(np.ones(3, np.float32), name="exp")
    spec = kernel_spec(fused(lambda x: F.exp(x * do + exp), np.ones(3, np.float32)).groups[0])
    assert [p.name for p in spec.inputs] == ["v_do", "x", "v_exp"]  # do * x, by __rmul__
    assert "v_do * x" in spec.body and "+ v_exp" in spec.body
    NAN = Variable(np.ones(3, np.float32), name="NAN")
    π = Variable(np.ones(3, np.float32), name="π")
    spec = kernel_spec(fused(lambda x: F.exp(x * NAN + π), np.ones(3, np.float32)).groups[0])
    assert [p.name for p in spec.inputs] == ["v_NAN", "x", "v2"]  # v<position> for π
    W_1 = Variable(np.ones(3, np.float32), name="W_1")
    spec = kernel_spec(fused(lambda x: F.exp(x * W_1), np.ones(3, np.float32)).groups[0])
    assert [p.name for p in spec.inputs] == ["W_1", "x"]  # one capital: no macro


def test_a_spec_is_a_frozen_record():
    spec = KernelSpec("k0", (), (), (2,), "")
    with pytest.raises(AttributeError):
        spec.body = "x"


# =============================================================================
# Fused replay: one call per kernel, like the interpreter
# =============================================================================


def state_of(graph, model):
    data = [(n.payload, n.payload.read().copy()) for n in graph.of_kind("state")]
    grads = [(p, None if p.grad is None else p.grad.data.copy()) for p in model.params()] \
        if model is not None else []
    return data, grads


def put_back(state):
    data, grads = state
    for slot, array in data:
        slot.write(array.copy())
    for p, g in grads:
        p.grad = None if g is None else Variable(g.copy())


def assert_same_state(a, b):
    for (_, x), (_, y) in zip(a[0] + a[1], b[0] + b[1]):
        np.testing.assert_array_equal(x, y)


def assert_fused_replay_is_the_interpreter(graph, model, calls):
    specs = []
    plan = Compiled(graph, reference_factory(graph, specs))
    assert [s.name for s in specs] == [g.name for g in graph.groups]
    assert plan.source.count("  # kernel k") == len(graph.groups)
    for args in calls:
        before = state_of(graph, model)
        expected = graph.interpret(*args)
        after = state_of(graph, model)
        put_back(before)
        got = plan.run(args)
        np.testing.assert_array_equal(got.data, expected.data)
        assert_same_state(state_of(graph, model), after)


@pytest.mark.parametrize("make_optimizer", [
    lambda: optimizers.SGD(lr=0.1),
    lambda: optimizers.MomentumSGD(lr=0.1),
    lambda: optimizers.Adam(alpha=0.01),
    lambda: optimizers.AdamW(alpha=0.01, weight_decay=0.1),
], ids=["SGD", "MomentumSGD", "Adam", "AdamW"])
def test_fused_replay_of_a_sigmoid_mlp_step_matches_the_interpreter(make_optimizer):
    calls = classification_calls()
    graph, model = traced_step(make_optimizer, calls)
    assert graph.groups
    assert_fused_replay_is_the_interpreter(graph, model, calls)


def test_fused_replay_of_the_tanh_chain_matches_the_interpreter():
    graph = fused(chain, np.ones(10, np.float32))
    rng = np.random.default_rng(1)
    calls = [(rng.standard_normal(10).astype(np.float32),) for _ in range(3)]
    assert_fused_replay_is_the_interpreter(graph, None, calls)
    code = Compiled(graph, reference_factory(graph)).source
    assert "    l, = _k0(x, a, b, c)  # kernel k0: 9 ops\n" in code


def test_a_kernel_failure_names_the_kernel():
    graph = fused(chain, np.ones(10, np.float32))

    def factory(group):
        def kernel(*arrays):
            raise ValueError("boom")
        return kernel

    with pytest.raises(ValueError, match=r"boom\n  while replaying chain: l: f32\[10\] = k0"):
        Compiled(graph, factory).run((np.ones(10, np.float32),))


# =============================================================================
# Property: random programs of elementwise ops and reductions
# =============================================================================

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

UNARY = {"exp": lambda a: F.exp(a * 0.1), "tanh": F.tanh, "sin": F.sin, "neg": lambda a: -a,
         "sum": F.sum,
         "rowsum": lambda a: F.sum(F.broadcast_to(a, (3, 4)), axis=1, keepdims=True),
         "matmul": lambda a: F.matmul(F.broadcast_to(a, (3, 4)), np.eye(4, dtype=np.float32))}
BINARY = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b}


def program(steps):
    def f(x, r):
        values = [x, r]
        for op, i, j in steps:
            a, b = values[i % len(values)], values[j % len(values)]
            values.append(UNARY[op](a) if op in UNARY else BINARY[op](a, b))
        return values[-1] + F.sum(values[len(values) // 2])
    return f


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(UNARY) + sorted(BINARY) * 2),
                          st.integers(0, 50), st.integers(0, 50)), min_size=1, max_size=12))
def test_fused_random_programs_run_like_the_interpreter(steps):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    r = rng.standard_normal((3, 1)).astype(np.float32)
    graph = dezero.trace(program(steps)).lower(x, r)
    graph.check()  # each group consecutive, in a topological order
    for group in graph.groups:
        assert len(group.nodes) >= 2 and group.outputs
    plan = Compiled(graph, reference_factory(graph))
    x2, r2 = x * 2 - 1, r + 0.5
    np.testing.assert_array_equal(plan.run((x2, r2)).data, graph.interpret(x2, r2).data)
