"""A GPT traced with automatic dynamic sizes: a forward called on a growing context
(generation's calls) and a training step called on varying batch sizes each replay one
graph of symbolic sizes after the first, static recording, and equal eager code (to
the bit on the python backend); the training step with the context length varying too."""
import numpy as np
import pytest
from backend_helpers import assert_replay_equal
from train_helpers import training_step

import dezero
from dezero import models, optimizers

VOCAB, BLOCK, LAYERS, HEADS, EMBD = 13, 48, 2, 2, 8


def small_gpt():
    np.random.seed(0)
    return models.GPT(VOCAB, BLOCK, LAYERS, HEADS, EMBD)


def test_a_growing_context_replays_one_graph_of_symbolic_length():
    model = small_gpt()
    forward = dezero.trace(lambda ids: model(ids))
    rng = np.random.default_rng(0)
    with dezero.no_grad(), dezero.test_mode():
        for T in range(1, 41):
            ids = rng.integers(0, VOCAB, (1, T))
            assert_replay_equal(forward(ids).data, model(ids).data, err_msg=f"T={T}")
    # T=1 is recorded static (a size of 1 broadcasts, so it never becomes symbolic);
    # T=2 differs only in that size, so one graph of T symbolic serves 2..40.
    assert forward.entries == 2
    assert len(forward.retraces) == 2 and "symbolic: ids axis 1" in forward.retraces[1]
    (entry,) = forward._symbolic
    assert any("<= 48" in str(r) for r in entry.graph.relations)  # the block_size check


def test_a_context_longer_than_block_size_is_refused_by_the_symbolic_graph():
    model = small_gpt()
    forward = dezero.trace(lambda ids: model(ids))
    with dezero.no_grad(), dezero.test_mode():
        for T in (1, 2, 3):
            forward(np.zeros((1, T), np.int64))
        try:
            forward(np.zeros((1, BLOCK + 1), np.int64))
        except ValueError as error:
            assert "block_size=48" in str(error)
        else:
            raise AssertionError("a context of block_size + 1 tokens passed")


@pytest.mark.parametrize("shapes, axis", [
    ([(3, 8), (5, 8), (2, 8), (4, 8), (7, 8)], 0),  # the batch size
    ([(3, 4), (3, 6), (3, 9), (3, 16), (3, 3)], 1),  # the context length
])
def test_the_training_step_of_varying_sizes_replays_one_symbolic_graph(shapes, axis):
    eager_model, traced_model = small_gpt(), small_gpt()
    eager = training_step(eager_model, optimizers.AdamW(alpha=1e-2).setup(eager_model),
                          max_norm=1.0)
    traced = training_step(traced_model, optimizers.AdamW(alpha=1e-2).setup(traced_model),
                           traced=True, max_norm=1.0)
    rng = np.random.default_rng(1)
    for shape in shapes:
        x, t = rng.integers(0, VOCAB, shape), rng.integers(0, VOCAB, shape)
        assert_replay_equal(traced(x, t).data, eager(x, t).data, err_msg=f"{shape}")
        for mine, theirs in zip(traced_model.params(), eager_model.params(), strict=True):
            assert_replay_equal(mine.data, theirs.data, err_msg=f"{shape}")
    assert traced.entries == 2  # the first shape static, then the size symbolic
    assert f"symbolic: x axis {axis}" in traced.retraces[1]
