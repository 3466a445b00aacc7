"""Habits users bring from other frameworks: each either works or is refused
with a message that shows the dezero way (print(model), PyTorch's argument
orders, optimizers given parameters, DataLoader's drop_last)."""
import numpy as np
import pytest
from train_helpers import training_step

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import optimizers
from dezero.models import MLP, Sequential


# =============================================================================
# PyTorch's argument orders
# =============================================================================
def test_linear_in_pytorchs_order_is_refused_with_the_books_order():
    with pytest.raises(TypeError, match=r"Linear\(out_size.*in_size=2"):
        L.Linear(2, 10)


def test_conv2d_refuses_a_non_bool_nobias():
    with pytest.raises(TypeError, match="nobias"):
        L.Conv2d(8, 3, 1, 0, 5)


@pytest.mark.parametrize("nobias", [True, False, np.bool_(True)])
def test_linear_takes_a_bool_nobias(nobias):
    layer = L.Linear(3, nobias=nobias, in_size=2)
    assert (layer.b is None) == bool(nobias)


@pytest.mark.parametrize("make", [
    lambda m: optimizers.Adam(m.params()), lambda m: optimizers.SGD(list(m.params())),
    lambda m: optimizers.MomentumSGD(m), lambda m: optimizers.AdamW(m.l0.W)])
def test_an_optimizer_given_parameters_says_to_use_setup(make):
    model = MLP((4, 2))
    model(np.zeros((1, 3), dtype=np.float32))
    with pytest.raises(TypeError, match=r"\.setup\(model\)"):
        make(model)


# =============================================================================
# print(model): the layer tree, each parameter's shape, the parameter count
# =============================================================================
def test_print_model_shows_the_tree_shapes_and_count():
    model = MLP((10, 3))
    model(np.zeros((4, 2), dtype=np.float32))
    text = repr(model)
    assert text.splitlines() == [
        "MLP  (63 parameters)",
        "  activation: sigmoid (function)",
        "  l0: Linear  (30 parameters)",
        "    W  (2, 10) float32",
        "    b  (10,) float32",
        "  l1: Linear  (33 parameters)",
        "    W  (10, 3) float32",
        "    b  (3,) float32",
    ]
    assert str(model) == text


def test_print_sequential_shows_its_functions_in_place():
    model = Sequential(L.Linear(4, in_size=2), F.relu, L.Linear(1, in_size=4))
    assert repr(model).splitlines() == [
        "Sequential  (17 parameters)", "  l0: Linear  (12 parameters)",
        "    W  (2, 4) float32", "    b  (4,) float32", "  l1: relu (function)",
        "  l2: Linear  (5 parameters)",
        "    W  (4, 1) float32", "    b  (1,) float32"]


def test_print_model_before_the_first_call_shows_open_sizes():
    text = repr(MLP((10, 3)))
    assert "W  (in_size, 10) float32, made at the first call" in text
    assert text.splitlines()[0] == "MLP  (13 parameters so far; 2 arrays not made yet)"
    assert "  l0: Linear  (10 parameters so far)" in text
    assert repr(L.Linear(1)).splitlines()[0] == \
        "Linear  (1 parameter so far; 1 array not made yet)"


def test_print_model_shows_state_and_counts_a_shared_parameter_once():
    model = dezero.Model()
    model.bn = L.BatchNorm()
    model.bn(np.zeros((2, 3), dtype=np.float32))
    model.a = L.Linear(3, in_size=3, nobias=True)
    model.b = L.Linear(3, in_size=3, nobias=True)
    model.b.W = model.a.W
    lines = repr(model).splitlines()
    assert lines[0] == "Model  (15 parameters)"  # gamma, beta and one W of 9
    assert "    avg_mean  (3,) float32, state" in lines
    assert "    W  (3, 3) float32, shared with a/W" in lines
    assert "  b: Linear  (0 parameters)" in lines  # its W is counted under a


def test_print_model_counts_each_sub_layer_and_groups_thousands():
    model = dezero.Model()
    model.block = dezero.Model()
    model.block.fc = L.Linear(1000, in_size=1000)
    model.block.bn = L.BatchNorm()
    model.block.bn(np.zeros((2, 1000), dtype=np.float32))
    model.head = L.Linear(1, in_size=1000, nobias=True)
    lines = repr(model).splitlines()
    assert lines[0] == "Model  (1,004,000 parameters)"
    assert "  block: Model  (1,003,000 parameters)" in lines
    assert "    fc: Linear  (1,001,000 parameters)" in lines
    assert "    bn: BatchNorm  (2,000 parameters)" in lines
    assert "  head: Linear  (1,000 parameters)" in lines


def test_print_model_survives_a_layer_that_refers_back_to_its_parent():
    model = MLP((2,))
    model.l0.parent = model
    lines = repr(model).splitlines()
    assert "    parent: MLP, shown above" in lines


# =============================================================================
# DataLoader(drop_last=...)
# =============================================================================
class _Numbers(dezero.Dataset):
    def prepare(self):
        self.data = np.arange(20, dtype=np.float32).reshape(10, 2)
        self.label = np.arange(10)


@pytest.mark.parametrize("drop_last, sizes", [(False, [3, 3, 3, 1]), (True, [3, 3, 3])])
def test_dataloader_drop_last(drop_last, sizes):
    loader = dezero.DataLoader(_Numbers(), 3, shuffle=False, drop_last=drop_last)
    for _ in range(2):  # and again in the next epoch
        batches = list(loader)
        assert [len(t) for _, t in batches] == sizes
        assert len(loader) == len(sizes)
    assert np.array_equal(np.concatenate([t for _, t in batches]), np.arange(sum(sizes)))


def test_dataloader_drop_last_with_fewer_examples_than_a_batch_yields_nothing():
    assert list(dezero.DataLoader(_Numbers(), 16, drop_last=True)) == []


def test_dataloader_refuses_a_non_bool_drop_last():
    with pytest.raises(TypeError, match="drop_last"):
        dezero.DataLoader(_Numbers(), 3, drop_last="yes")


def test_a_traced_loop_over_dropped_last_batches_records_one_graph():
    np.random.seed(0)
    model = MLP((5, 10))
    step = training_step(model, optimizers.SGD(0.1).setup(model), traced=True)
    for _ in range(3):
        for x, t in dezero.DataLoader(_Numbers(), 3, drop_last=True):
            step(x, t)
    assert step.entries == 1
