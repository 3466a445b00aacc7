"""A GPT's whole training step traced as one graph: forward, backward, clip_grad_norm and
AdamW. Its replay equals eager code on each backend (to the bit on the python backend and
the interpreter), the causal mask is a constant of the graph, and the graph's kernels are
a transformer's: layer norm rows with the residual adds before them, the attention's
masked softmax rows, the loss's log-softmax rows, GELU and its gradient, and AdamW's
update of every parameter in one horizontal kernel."""
import numpy as np
import pytest
from backend_helpers import assert_replay_equal
from train_helpers import training_step

from dezero import models, optimizers
from dezero.kernels import cpu

VOCAB, BLOCK, LAYERS, HEADS, EMBD, BATCH = 11, 8, 2, 2, 8, 3


def gpt_step(traced):
    """(model, step): a small GPT and its training step with clip_grad_norm and AdamW,
    traced or not; every call makes the same model."""
    np.random.seed(0)
    model = models.GPT(VOCAB, BLOCK, LAYERS, HEADS, EMBD)
    optimizer = optimizers.AdamW(alpha=1e-2).setup(model)
    return model, training_step(model, optimizer, traced, max_norm=1.0)


def batches(n):
    rng = np.random.default_rng(1)
    return [(rng.integers(0, VOCAB, (BATCH, BLOCK)), rng.integers(0, VOCAB, (BATCH, BLOCK)))
            for _ in range(n)]


@pytest.fixture(scope="module")
def graph():
    _, step = gpt_step(traced=True)
    step(*batches(1)[0])
    return step.graph


def test_the_traced_step_equals_eager_over_several_calls():
    (eager_model, eager), (model, traced) = gpt_step(False), gpt_step(True)
    for x, t in batches(4):
        assert_replay_equal(traced(x, t).data, eager(x, t).data)  # to the bit on python
        for mine, theirs in zip(model.params(), eager_model.params(), strict=True):
            assert_replay_equal(mine.data, theirs.data)
    assert traced.entries == 1


@pytest.mark.parametrize("backend", ["interpreter", "python", "cpu"])
def test_each_backend_replays_the_step_as_eager(backend):
    if backend == "cpu" and cpu.missing_reason() is not None:
        pytest.skip(cpu.missing_reason())
    (eager_model, eager), (model, traced) = gpt_step(False), gpt_step(True)
    calls = batches(4)
    eager(*calls[0])
    traced(*calls[0])  # the recording
    plan = traced.graph.compile(backend).wait()
    for x, t in calls[1:]:
        loss, want = plan(x, t), eager(x, t)
        for mine, theirs in zip([loss, *model.params()], [want, *eager_model.params()],
                                strict=True):
            if backend == "cpu":  # fused kernels: the C library's vector math
                np.testing.assert_allclose(mine.data, theirs.data, rtol=1e-4, atol=1e-6)
            else:
                np.testing.assert_array_equal(mine.data, theirs.data)


def test_the_causal_mask_is_one_constant_of_the_graph(graph):
    masks = [n for n in graph.of_kind("const") if n.outputs[0].dtype == bool]
    assert len(masks) == 1
    np.testing.assert_array_equal(masks[0].payload, np.tri(BLOCK, dtype=bool))
    mask = masks[0].outputs[0]
    # both wheres of each layer, forward and backward, read it
    assert sum(mask in n.inputs for n in graph.of_kind("op") if n.op == "where") == 4 * LAYERS


def ops(group):
    return [n.op for n in group.nodes]


def test_layer_norms_are_row_kernels_with_the_residual_adds_before_them(graph):
    rows = [g for g in graph.groups if g.axes == (2,) and g.shape == (BATCH, BLOCK, EMBD)
            and ops(g).count("sum") == 2]  # the mean and the variance
    assert len(rows) == 2 * LAYERS + 1  # two a block, and the last one
    assert ops(rows[0])[0] == "add"  # the token and position embeddings
    for group in rows[1:]:  # the projection's bias, then the residual add
        assert ops(group)[:3] == ["add", "add", "sum"]
    assert all(ops(g)[-2:] == ["mul", "add"] or "pow" in ops(g) for g in rows)


def test_the_attention_softmax_with_its_masks_is_one_row_kernel_each_way(graph):
    shape = (BATCH, HEADS, BLOCK, BLOCK)
    softmax = [ops(g) for g in graph.groups if g.axes == (3,) and g.shape == shape]
    forward = ["mul", "where", "max", "sub", "exp", "sum", "div", "where"]
    backward = ["where", "mul", "sum", "mul", "sub", "where", "mul"]
    assert softmax == LAYERS * [forward] + LAYERS * [backward]
    assert not [n for n in graph.of_kind("op") if n.op == "where" and
                not any(n in g.nodes for g in graph.groups)]


def test_the_loss_is_one_log_softmax_row_kernel_with_its_gradient(graph):
    loss, = [g for g in graph.groups if any(n.record.labels for n in g.nodes)]
    assert loss.axes == (1,) and loss.shape == (BATCH * BLOCK, VOCAB)
    assert {"max", "exp", "log", "pick_labels", "softmax_cross_entropy_grad"} <= set(ops(loss))


def test_gelu_and_its_gradient_are_in_kernels(graph):
    wide = (BATCH, BLOCK, 4 * EMBD)
    gelu = [g for g in graph.groups if g.shape == wide and g.axes is None]
    assert len(gelu) == LAYERS and all("tanh" in ops(g) for g in gelu)
    # the gradient, with the fc bias's gradient summed over the batch and its square
    # for the norm that clips it
    grads = [g for g in graph.groups if g.shape == wide and g.axes == (0, 1)]
    assert len(grads) == LAYERS
    assert all(ops(g)[-3:] == ["sum_to", "square", "sum"] and ops(g).count("mul") >= 6
               for g in grads)
    assert not [n for n in graph.of_kind("op") if n.op == "tanh" and
                not any(n in g.nodes for g in graph.groups)]


def test_adamw_updates_every_parameter_in_one_horizontal_kernel(graph):
    update, = [g for g in graph.groups if g.segments]
    model, _ = gpt_step(traced=False)
    assert len(update.segments) == len(list(model.params()))
    written = {n.inputs[1].name for n in graph.of_kind("write") if n.attrs["field"] == "data"
               and n.inputs[0].label.startswith("model.")}
    assert len(written) == len(update.segments)
    assert written <= {v.name for v in update.outputs}


def test_the_printed_graph_names_values_by_their_modules(graph):
    text = str(graph)
    assert "model.blocks.0.attn.qkv.W" in text and "optimizer.ms[blocks.1.mlp.fc.W]" in text
    assert text.count("# kernel ") == len(graph.groups)
