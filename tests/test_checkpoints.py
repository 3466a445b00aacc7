"""state_dict / load_state_dict of models and optimizers, and checkpoints: a run
resumed from one continues bit for bit as the uninterrupted run, eager or traced."""
import pickle

import numpy as np
import pytest
from backend_helpers import assert_replay_equal

import dezero
import dezero.functions as F
from dezero import optimizers
from dezero.checkpoints import load_checkpoint, save_checkpoint
from dezero.models import MLP

OPTIMIZERS = [lambda: optimizers.SGD(0.1), lambda: optimizers.MomentumSGD(0.1),
              lambda: optimizers.AdaGrad(0.1), lambda: optimizers.AdaDelta(),
              lambda: optimizers.Adam(0.01), lambda: optimizers.AdamW(0.01)]


class _Points(dezero.Dataset):
    def prepare(self):
        rng = np.random.RandomState(1)
        self.data = rng.randn(30, 2).astype(np.float32)
        self.label = (self.data[:, 0] * self.data[:, 1] > 0).astype(np.int64)


def _setup(make_optimizer, seed=0):
    np.random.seed(seed)
    model = MLP((8, 2))
    model(np.zeros((1, 2), dtype=np.float32))
    optimizer = make_optimizer().setup(model)
    return model, optimizer


def _step_fn(model, optimizer, traced):
    def step(x, t):
        loss = F.softmax_cross_entropy(F.dropout(model(x), 0.2), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return dezero.trace(step) if traced else step


def _train(model, optimizer, loader, step, epochs):
    losses = []
    for _ in range(epochs):
        for x, t in loader:
            losses.append(step(x, t).data.copy())
    return losses


@pytest.mark.parametrize("make_optimizer", OPTIMIZERS)
def test_model_and_optimizer_state_dicts_round_trip(make_optimizer):
    model, optimizer = _setup(make_optimizer)
    x, t = _Points().data, _Points().label
    step = _step_fn(model, optimizer, traced=False)
    for _ in range(3):
        step(x, t)
    model_state, optimizer_state = model.state_dict(), optimizer.state_dict()
    assert sorted(model_state) == ["l0/W", "l0/b", "l1/W", "l1/b"]
    other_model, other_optimizer = _setup(make_optimizer, seed=5)
    other_model.load_state_dict(model_state)
    other_optimizer.load_state_dict(optimizer_state)
    other_step = _step_fn(other_model, other_optimizer, traced=False)
    np.random.seed(3)
    want = [step(x, t).data for _ in range(3)]
    np.random.seed(3)
    got = [other_step(x, t).data for _ in range(3)]
    np.testing.assert_array_equal(got, want)
    for a, b in zip(model.params(), other_model.params()):
        np.testing.assert_array_equal(a.data, b.data)


def test_adam_state_dict_holds_moments_step_count_and_hyperparameters():
    model, optimizer = _setup(lambda: optimizers.Adam(0.01, beta1=0.8))
    step = _step_fn(model, optimizer, traced=False)
    for _ in range(4):
        step(_Points().data, _Points().label)
    state = optimizer.state_dict()
    assert str(state["type"]) == "Adam"
    assert int(state["counters/t"]) == 4
    assert float(state["hyperparameters/beta1"]) == 0.8
    np.testing.assert_array_equal(state["ms/l0/W"], optimizer.ms[model.l0.W].data)
    np.testing.assert_array_equal(state["vs/l1/b"], optimizer.vs[model.l1.b].data)
    state["ms/l0/W"][...] = 7  # a copy: the optimizer is untouched
    assert not np.any(optimizer.ms[model.l0.W].data == 7)


def test_optimizer_load_state_dict_refuses_a_mismatch_and_changes_nothing():
    model, optimizer = _setup(lambda: optimizers.Adam(0.01))
    _step_fn(model, optimizer, traced=False)(_Points().data, _Points().label)
    state = optimizer.state_dict()
    with pytest.raises(ValueError, match="saved from Adam, loaded into MomentumSGD"):
        optimizers.MomentumSGD().setup(model).load_state_dict(state)
    bad = dict(state)
    bad["ms/l0/W"] = np.zeros((3, 3), dtype=np.float32)
    bad["alpha"] = np.array(5.0)
    before = optimizer.ms[model.l0.W].data.copy()
    with pytest.raises(ValueError, match=r"ms/l0/W has shape \(3, 3\).*alpha is not a slot"):
        optimizer.load_state_dict(bad)
    np.testing.assert_array_equal(optimizer.ms[model.l0.W].data, before)
    with pytest.raises(RuntimeError, match="setup"):
        optimizers.Adam().state_dict()


@pytest.mark.parametrize("key, value, problem", [
    ("hyperparameters/beta1", np.array(1.5), r"hyperparameters/beta1: beta1 must be in \[0, 1\)"),
    ("hyperparameters/eps", np.array([1e-8, 1e-8]), "hyperparameters/eps is not one number"),
    ("counters/t", np.zeros(3), "counters/t is not one number"),
    ("ms/l0/W", np.zeros((2, 8), np.complex64), "ms/l0/W holds complex64 values")])
def test_optimizer_load_state_dict_checks_every_value_before_changing_any(
        key, value, problem):
    model, optimizer = _setup(lambda: optimizers.Adam(0.01))
    _step_fn(model, optimizer, traced=False)(_Points().data, _Points().label)
    state = optimizer.state_dict()
    state["hyperparameters/alpha"] = np.array(0.5)  # before the bad one
    state[key] = value
    with pytest.raises(ValueError, match="Adam.load_state_dict: .*" + problem):
        optimizer.load_state_dict(state)
    assert optimizer.alpha == 0.01 and optimizer.t == 1


def test_a_loaded_state_dict_shares_no_array_with_the_model():
    # Keep the best weights, go back to them, train on with the book's in-place
    # update, go back again: the kept dict must still hold the best weights.
    model, _ = _setup(lambda: optimizers.SGD())
    best = model.state_dict()
    kept = {key: array.copy() for key, array in best.items()}
    for _ in range(2):
        model.load_state_dict(best)
        for param in model.params():
            param.data -= 0.5
        for key, array in best.items():
            np.testing.assert_array_equal(array, kept[key])


def test_model_load_state_dict_checks_keys_and_shapes():
    model = MLP((8, 2))
    model(np.zeros((1, 2), dtype=np.float32))
    state = model.state_dict()
    state["l0/W"] = np.zeros((3, 8))
    with pytest.raises(ValueError, match=r"shapes differ: l0/W: file \(3, 8\), model \(2, 8\)"):
        model.load_state_dict(state)
    with pytest.raises(ValueError, match="missing from the state dict: l0/b, l1/W, l1/b"):
        model.load_state_dict({"l0/W": state["l0/W"]})
    lazy = MLP((8, 2))
    lazy.load_state_dict(model.state_dict())  # sizes still open come from the arrays
    np.testing.assert_array_equal(lazy.l0.W.data, model.l0.W.data)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
@pytest.mark.parametrize("make_optimizer", [OPTIMIZERS[1], OPTIMIZERS[4]],
                         ids=["MomentumSGD", "Adam"])
def test_resuming_from_a_checkpoint_continues_as_uninterrupted_training(
        tmp_path, make_optimizer, traced):
    def run(epochs, model, optimizer, loader, schedule):
        step = _step_fn(model, optimizer, traced)
        losses = []
        for _ in range(epochs):
            losses += _train(model, optimizer, loader, step, 1)
            schedule.step()
        return losses

    model, optimizer = _setup(make_optimizer)
    loader = dezero.DataLoader(_Points(), 8, drop_last=True)
    schedule = dezero.schedules.StepDecay(optimizer, 2, gamma=0.5)
    want = run(5, model, optimizer, loader, schedule)

    model, optimizer = _setup(make_optimizer)
    loader = dezero.DataLoader(_Points(), 8, drop_last=True)
    schedule = dezero.schedules.StepDecay(optimizer, 2, gamma=0.5)
    got = run(2, model, optimizer, loader, schedule)
    path = save_checkpoint(tmp_path / "run", model, optimizer, loader=loader,
                           schedule=schedule, epoch=2)
    assert path.endswith("run.npz")
    np.random.seed(99)  # a new process: other random state, new objects
    model, optimizer = _setup(make_optimizer, seed=7)
    loader = dezero.DataLoader(_Points(), 8, drop_last=True)
    schedule = dezero.schedules.StepDecay(optimizer, 2, gamma=0.5)
    numbers = load_checkpoint(path, model, optimizer, loader=loader, schedule=schedule)
    assert numbers == {"epoch": 2}
    got += run(3, model, optimizer, loader, schedule)
    if traced:
        assert_replay_equal(np.array(got), np.array(want))
    else:
        np.testing.assert_array_equal(got, want)


def test_checkpoint_files_hold_no_pickle_and_a_failed_write_keeps_the_old_one(
        tmp_path, monkeypatch):
    model, optimizer = _setup(lambda: optimizers.Adam())
    path = save_checkpoint(tmp_path / "c.npz", model, optimizer, epoch=1)
    with np.load(path, allow_pickle=False) as npz:
        assert all(npz[key].dtype != object for key in npz.files)
    before = open(path, "rb").read()
    with pytest.raises(TypeError, match="neither a number nor"):
        save_checkpoint(path, model, optimizer, note=object())
    assert open(path, "rb").read() == before

    def savez_interrupted(f, **arrays):  # a crash half way through the write
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt
    monkeypatch.setattr(np, "savez", savez_interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, model, optimizer, epoch=2)
    assert open(path, "rb").read() == before
    assert [p.name for p in tmp_path.iterdir()] == ["c.npz"]


def test_a_number_no_numpy_type_holds_is_refused_rather_than_pickled(tmp_path):
    model, _ = _setup(lambda: optimizers.SGD())
    with pytest.raises(TypeError, match=f"seed={2**64} is an int no int64 or uint64 holds"):
        save_checkpoint(tmp_path / "c.npz", model, seed=2**64)
    assert not list(tmp_path.iterdir())
    path = save_checkpoint(tmp_path / "c.npz", model, seed=2**64 - 1, step=-2**63)
    assert load_checkpoint(path, model) == {"seed": 2**64 - 1, "step": -2**63}


def test_load_checkpoint_names_what_the_file_lacks(tmp_path):
    model, optimizer = _setup(lambda: optimizers.SGD())
    path = save_checkpoint(tmp_path / "c.npz", model)
    with pytest.raises(ValueError, match="no state for optimizer"):
        load_checkpoint(path, model, optimizer)


def test_a_traced_step_reads_a_state_dict_loaded_after_it_was_recorded():
    model, optimizer = _setup(lambda: optimizers.Adam(0.01))
    x, t = _Points().data, _Points().label
    step = _step_fn(model, optimizer, traced=True)
    step(x, t)
    saved_model, saved_optimizer = model.state_dict(), optimizer.state_dict()
    np.random.seed(4)
    want = [step(x, t).data.copy() for _ in range(3)]
    model.load_state_dict(saved_model)
    optimizer.load_state_dict(saved_optimizer)
    np.random.seed(4)
    got = [step(x, t).data.copy() for _ in range(3)]
    np.testing.assert_array_equal(got, want)
    assert step.entries == 1


def test_optimizer_state_for_a_model_not_built_yet_says_to_load_the_model_first():
    model, optimizer = _setup(lambda: optimizers.Adam())
    _step_fn(model, optimizer, traced=False)(_Points().data, _Points().label)
    lazy = MLP((8, 2))
    with pytest.raises(ValueError, match="l0/W is not built yet .load the model's state"):
        optimizers.Adam().setup(lazy).load_state_dict(optimizer.state_dict())
    lazy.load_state_dict(model.state_dict())
    optimizers.Adam().setup(lazy).load_state_dict(optimizer.state_dict())


def test_a_checkpoint_loads_into_a_model_not_built_yet(tmp_path):
    # As load_weights does: a new process builds its MLP lazily, then resumes.
    model, optimizer = _setup(lambda: optimizers.Adam(0.01))
    x, t = _Points().data, _Points().label
    step = _step_fn(model, optimizer, traced=False)
    step(x, t)
    path = save_checkpoint(tmp_path / "c.npz", model, optimizer, epoch=1)
    lazy = MLP((8, 2))
    lazy_optimizer = optimizers.Adam(0.01).setup(lazy)
    assert load_checkpoint(path, lazy, lazy_optimizer) == {"epoch": 1}
    lazy_step = _step_fn(lazy, lazy_optimizer, traced=False)
    np.random.seed(3)
    want = [step(x, t).data for _ in range(2)]
    np.random.seed(3)
    np.testing.assert_array_equal([lazy_step(x, t).data for _ in range(2)], want)


def test_a_checkpoint_that_does_not_fit_leaves_everything_as_it_was(tmp_path):
    model, optimizer = _setup(lambda: optimizers.Adam(0.01))
    _step_fn(model, optimizer, traced=False)(_Points().data, _Points().label)
    loader = dezero.DataLoader(_Points(), 8)
    path = save_checkpoint(tmp_path / "c.npz", model, optimizer, loader=loader)
    lazy = MLP((8, 2))
    lazy_optimizer = optimizers.MomentumSGD().setup(lazy)
    with pytest.raises(ValueError, match="saved from Adam, loaded into MomentumSGD"):
        load_checkpoint(path, lazy, lazy_optimizer)
    assert lazy.l0.W.data is None and lazy.l1.W.data is None  # not half built
    other, other_optimizer = _setup(lambda: optimizers.Adam(0.01), seed=5)
    before, optimizer_before = other.state_dict(), other_optimizer.state_dict()
    small = dezero.DataLoader(dezero.datasets.Spiral(), 8)  # another dataset
    with pytest.raises(ValueError, match="not one of this dataset's"):
        load_checkpoint(path, other, other_optimizer, loader=small)
    for key, array in other.state_dict().items():
        np.testing.assert_array_equal(array, before[key])
    assert other_optimizer.t == int(optimizer_before["counters/t"]) == 0
    assert not other_optimizer.ms


def test_a_checkpoint_of_two_models_and_their_optimizers_loads_into_lazy_ones(tmp_path):
    # A GAN's checkpoint: the second model and its optimizer are passed by name.
    generator, generator_optimizer = _setup(lambda: optimizers.Adam(0.01))
    critic, critic_optimizer = _setup(lambda: optimizers.SGD(0.1), seed=1)
    path = save_checkpoint(tmp_path / "gan", generator, generator_optimizer,
                           critic=critic, critic_optimizer=critic_optimizer)
    lazy_generator, lazy_critic = MLP((8, 2)), MLP((8, 2))
    load_checkpoint(path, lazy_generator, optimizers.Adam().setup(lazy_generator),
                    critic=lazy_critic,
                    critic_optimizer=optimizers.SGD().setup(lazy_critic))
    np.testing.assert_array_equal(lazy_critic.l1.W.data, critic.l1.W.data)
    with pytest.raises(ValueError, match="saved from SGD, loaded into Adam"):
        load_checkpoint(path, MLP((8, 2)), critic=(lazy := MLP((8, 2))),
                        critic_optimizer=optimizers.Adam().setup(lazy))
    assert lazy.l0.W.data is None


def test_a_damaged_checkpoint_is_one_clear_error_and_changes_nothing(tmp_path):
    model, optimizer = _setup(lambda: optimizers.Adam())
    path = save_checkpoint(tmp_path / "c.npz", model, optimizer)
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    before = model.state_dict()
    with pytest.raises(ValueError, match=r"load_checkpoint: cannot read .*c\.npz.*save_checkpoint"):
        load_checkpoint(path, model, optimizer)
    with pytest.raises(FileNotFoundError, match="load_checkpoint: no such file"):
        load_checkpoint(tmp_path / "none.npz", model)
    for key, array in model.state_dict().items():
        np.testing.assert_array_equal(array, before[key])


@pytest.mark.parametrize("key, value", [("random/keys", np.zeros(10, np.uint32)),
                                        ("random/pos", np.arange(3)),
                                        ("numbers/epoch", np.arange(3))])
def test_a_checkpoint_with_a_damaged_random_state_or_number_changes_nothing(
        tmp_path, key, value):
    model, optimizer = _setup(lambda: optimizers.Adam())
    path = save_checkpoint(tmp_path / "c.npz", model, optimizer, epoch=3)
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files}
    arrays[key] = value  # readable, but not a state numpy takes
    np.savez(path, **arrays)
    lazy = MLP((8, 2))
    random_state = np.random.get_state()
    with pytest.raises(ValueError, match=f"load_checkpoint.*c.npz.*{key}"):
        load_checkpoint(path, lazy, optimizers.Adam().setup(lazy))
    assert lazy.l0.W.data is None
    np.testing.assert_array_equal(np.random.get_state()[1], random_state[1])


def test_a_pickle_or_a_text_file_is_named_as_not_an_npz_file(tmp_path):
    # numpy's own message suggests loading it with allow_pickle or pickle.load().
    model = MLP((8, 2))
    pickled, text = tmp_path / "run.pkl", tmp_path / "notes.npz"
    pickled.write_bytes(pickle.dumps({"l0/W": np.zeros((2, 8))}))
    text.write_text("epoch 3, loss 0.25")
    for path in (pickled, text):
        for load in (lambda: load_checkpoint(path, model), lambda: model.load_weights(path)):
            with pytest.raises(ValueError, match="not an npz archive") as error:
                load()
            assert "allow_pickle" not in str(error.value) and "pickle.load" not in str(error.value)


def test_a_loader_refuses_an_order_that_is_not_of_its_dataset():
    loader = dezero.DataLoader(_Points(), 8)
    state = loader.state_dict()
    next(loader)
    assert int(loader.state_dict()["iteration"]) == 1 and int(state["iteration"]) == 0
    loader.load_state_dict(state)
    assert loader.iteration == 0
    with pytest.raises(ValueError, match="not one of this dataset's 30 examples"):
        loader.load_state_dict({"index": np.arange(29), "iteration": np.array(0)})
    with pytest.raises(ValueError, match="not one of this dataset's 30 examples"):
        loader.load_state_dict({"index": np.zeros(30, int), "iteration": np.array(0)})


def test_a_loader_refuses_a_position_its_batches_cannot_continue_from():
    loader = dezero.DataLoader(_Points(), 8)
    next(loader)
    state = loader.state_dict()
    wider = dezero.DataLoader(_Points(), 16)  # batch 1 of 16 would skip examples 8-15
    with pytest.raises(ValueError, match="saved mid-epoch with batch_size 8, not 16"):
        wider.load_state_dict(state)
    assert wider.iteration == 0
    for iteration in (-1, 5):
        with pytest.raises(ValueError, match=f"iteration {iteration} is not in 0..4"):
            loader.load_state_dict({**state, "iteration": np.array(iteration)})
    for _ in loader:  # the epoch ends: its next order is drawn, iteration back to 0
        pass
    wider.load_state_dict(loader.state_dict())  # a new batch size from the next epoch
    np.testing.assert_array_equal(wider.index, loader.index)
    assert [len(t) for _, t in wider] == [16, 14]
