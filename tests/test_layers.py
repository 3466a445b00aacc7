"""Layers: gradients against central differences (float64), initialisation,
parameter order, devices of state, and save_weights / load_weights."""
import os
import re

import numpy as np
import pytest
from zip_damage import FIELDS, damaged

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import Parameter, Variable

# =============================================================================
# Gradient checking of a whole layer: inputs and parameters
# =============================================================================


def numerical_grads(loss, variables, eps=1e-6):
    """Central differences of loss() with respect to each Variable's data."""
    grads = []
    for var in variables:
        base = var.data.copy()
        grad = np.zeros_like(base)
        for i in np.ndindex(base.shape):
            for sign in (1, -1):
                moved = base.copy()
                moved[i] += sign * eps
                var.data = moved
                grad[i] += sign * float(loss().data) / (2 * eps)
        var.data = base
        grads.append(grad)
    return grads


def check_grads(forward, variables, seed=0, rtol=1e-5, atol=1e-7):
    """backward() of a random weighting of forward()'s output matches central
    differences for every Variable in `variables`."""
    weights = np.random.RandomState(seed).randn(*forward().shape)

    def loss():
        return F.sum(forward() * weights)

    for var in variables:
        var.cleargrad()
    loss().backward()
    got = [var.grad.data for var in variables]
    want = numerical_grads(loss, variables)
    for var, g, w in zip(variables, got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{var.name}")


def rand(*shape, seed=1):
    return Variable(np.random.RandomState(seed).randn(*shape), name="x")


def to_float64(layer):
    for p in layer.params():
        p.data = p.data.astype(np.float64)
    return layer


def test_linear_gradients():
    layer = L.Linear(3, dtype=np.float64)
    x = rand(4, 5)
    layer(x)  # makes W
    layer.b.data = np.random.RandomState(2).randn(3)
    check_grads(lambda: layer(x), [x, layer.W, layer.b])


def test_linear_on_batched_sequences_keeps_W_two_dimensional():
    # (N, T, in) as PyTorch's nn.Linear takes it: gradients of x, W and b, and an
    # optimizer step leaves W (in, out).
    layer = L.Linear(3, dtype=np.float64)
    x = rand(2, 4, 5)
    assert layer(x).shape == (2, 4, 3) and layer.W.shape == (5, 3)
    layer.b.data = np.random.RandomState(2).randn(3)
    check_grads(lambda: layer(x), [x, layer.W, layer.b])
    dezero.optimizers.SGD(lr=0.1).setup(layer).update()
    assert layer.W.shape == (5, 3) and layer.b.shape == (3,)


def test_linear_nobias_gradients():
    layer = L.Linear(3, nobias=True, dtype=np.float64, in_size=5)
    assert layer.b is None and [p.name for p in layer.params()] == ["W"]
    x = rand(4, 5)
    check_grads(lambda: layer(x), [x, layer.W])


def test_rnn_gradients_through_two_steps():
    layer = to_float64(L.RNN(3, in_size=2))
    xs = [rand(4, 2, seed=1), rand(4, 2, seed=2)]

    def forward():
        layer.reset_state()
        layer(xs[0])
        return layer(xs[1])

    check_grads(forward, xs + list(layer.params()))


@pytest.mark.parametrize("stride, pad", [(1, 0), (2, 1)])
def test_conv2d_gradients(stride, pad):
    layer = L.Conv2d(4, kernel_size=3, stride=stride, pad=pad, dtype=np.float64)
    x = rand(2, 3, 5, 5)
    layer(x)
    assert layer.in_channels == 3 and layer.W.shape == (4, 3, 3, 3)
    layer.b.data = np.random.RandomState(2).randn(4)
    check_grads(lambda: layer(x), [x, layer.W, layer.b])


@pytest.mark.parametrize("stride, pad", [(1, 0), (2, 1)])
def test_deconv2d_gradients(stride, pad):
    layer = L.Deconv2d(2, kernel_size=(3, 2), stride=stride, pad=pad, dtype=np.float64)
    x = rand(2, 3, 3, 4)
    layer(x)
    assert layer.in_channels == 3 and layer.W.shape == (3, 2, 3, 2)
    layer.b.data = np.random.RandomState(2).randn(2)
    check_grads(lambda: layer(x), [x, layer.W, layer.b])


def test_lstm_gradients_through_two_steps():
    layer = to_float64(L.LSTM(3, in_size=2))
    xs = [rand(4, 2, seed=1), rand(4, 2, seed=2)]

    def forward():
        layer.reset_state()
        layer(xs[0])
        return layer(xs[1])

    check_grads(forward, xs + list(layer.params()))


def test_embed_id_gradients_with_repeated_ids():
    layer = L.EmbedID(5, 3, dtype=np.float64)
    ids = np.array([[0, 2], [2, 4]])
    check_grads(lambda: layer(ids), [layer.W])
    assert layer(ids).shape == (2, 2, 3)
    np.testing.assert_array_equal(layer([4, 0]).data, layer.W.data[[4, 0]])
    np.testing.assert_array_equal(layer(3).data, layer.W.data[3])


@pytest.mark.parametrize("shape", [(6, 3), (4, 2, 3, 3)])
def test_batch_norm_gradients_in_training_and_test_mode(shape):
    layer = L.BatchNorm()
    x = rand(*shape)
    layer(x)
    rng = np.random.RandomState(3)
    layer.gamma.data = rng.randn(shape[1])
    layer.beta.data = rng.randn(shape[1])
    check_grads(lambda: layer(x), [x, layer.gamma, layer.beta])
    layer.avg_var.data = rng.rand(shape[1]) + 0.5
    with dezero.test_mode():
        check_grads(lambda: layer(x), [x, layer.gamma, layer.beta])


# =============================================================================
# Initialisation: shapes, scale, dtype, laziness
# =============================================================================


def test_linear_initialisation_is_scaled_float32_and_lazy():
    layer = L.Linear(200)
    assert layer.W.data is None
    y = layer(np.zeros((2, 400), dtype=np.float32))
    assert layer.in_size == 400 and layer.W.shape == (400, 200)
    assert layer.W.dtype == np.float32 and layer.b.dtype == np.float32
    assert y.dtype == np.float32
    np.testing.assert_array_equal(layer.b.data, 0)
    # randn * sqrt(1 / in_size): standard deviation 0.05
    assert abs(layer.W.data.std() - np.sqrt(1 / 400)) < 0.002


def test_linear_with_in_size_draws_from_the_global_rng_as_the_book():
    # Replay the global RNG's stream (saving and restoring its state, never reseeding).
    state = np.random.get_state()
    layer = L.Linear(3, in_size=2)
    after = np.random.get_state()
    np.random.set_state(state)
    want = np.random.randn(2, 3).astype(np.float32) * np.float32(np.sqrt(1 / 2))
    np.random.set_state(after)
    np.testing.assert_array_equal(layer.W.data, want)


@pytest.mark.parametrize("make, shape", [
    (lambda: L.Conv2d(8, 3, in_channels=50), (8, 50, 3, 3)),
    (lambda: L.Deconv2d(8, (3, 5), in_channels=50), (50, 8, 3, 5)),
])
def test_conv_initialisation_is_scaled_and_float32(make, shape):
    layer = make()
    assert layer.W.shape == shape and layer.W.dtype == np.float32
    assert layer.b.dtype == np.float32
    fan_in = 50 * shape[2] * shape[3]
    assert abs(layer.W.data.std() - np.sqrt(1 / fan_in)) < 0.1 * np.sqrt(1 / fan_in)


def test_conv2d_float32_output_and_nobias():
    layer = L.Conv2d(2, 3, pad=1, nobias=True)
    y = layer(np.ones((1, 4, 5, 5), dtype=np.float32))
    assert y.shape == (1, 2, 5, 5) and y.dtype == np.float32
    assert [p.name for p in layer.params()] == ["W"]


def test_rnn_h2h_is_hidden_by_hidden():
    # The book sized h2h with in_size, which breaks whenever in_size != hidden_size.
    layer = L.RNN(4, in_size=2)
    assert layer.h2h.W.shape == (4, 4)
    x = np.ones((3, 2), dtype=np.float32)
    h1 = layer(x)
    h2 = layer(x)
    assert h2.shape == (3, 4) and not np.allclose(h1.data, h2.data)
    layer.reset_state()
    np.testing.assert_allclose(layer(x).data, h1.data)


def test_rnn_lazy_input_size():
    layer = L.RNN(4)
    layer(np.ones((3, 7), dtype=np.float32))
    assert layer.x2h.W.shape == (7, 4) and layer.h2h.W.shape == (4, 4)


# =============================================================================
# Registration: order, nesting, sharing, unregistering
# =============================================================================


class Net(L.Layer):
    def __init__(self):
        super().__init__()
        self.z = Parameter(np.zeros(1, np.float32), name="z")
        self.fc = L.Linear(2, in_size=3)
        self.a = Parameter(np.zeros(2, np.float32), name="a")
        self.not_a_param = Variable(np.zeros(1))


def test_params_come_in_definition_order_recursively():
    net = Net()
    assert [p.name for p in net.params()] == ["z", "W", "b", "a"]
    flat = {}
    net._flatten_params(flat)
    assert list(flat) == ["z", "fc/W", "fc/b", "a"]


def test_shared_parameter_comes_once_and_reassignment_unregisters():
    net = Net()
    net.alias = net.a
    assert len(list(net.params())) == 4
    net.a = None
    net.alias = None
    assert [p.name for p in net.params()] == ["z", "W", "b"]
    del net.fc
    assert [p.name for p in net.params()] == ["z"]


def test_cleargrads_clears_every_parameter():
    net = Net()
    for p in net.params():
        p.grad = Variable(np.ones_like(p.data))
    net.cleargrads()
    assert all(p.grad is None for p in net.params())


# =============================================================================
# save_weights / load_weights
# =============================================================================


def test_save_and_load_round_trip(tmp_path):
    net, other = Net(), Net()
    path = tmp_path / "net.npz"
    assert net.save_weights(path) == str(path)
    other.load_weights(path)
    for p, q in zip(net.params(), other.params()):
        np.testing.assert_array_equal(p.data, q.data)
        assert q.dtype == np.float32


def test_path_without_npz_gets_it_as_numpy_does(tmp_path):
    net, other = Net(), Net()
    written = net.save_weights(str(tmp_path / "weights"))
    assert written.endswith("weights.npz") and os.path.exists(written)
    other.load_weights(str(tmp_path / "weights"))
    np.testing.assert_array_equal(other.fc.W.data, net.fc.W.data)


def test_saved_file_is_a_plain_npz_without_pickles(tmp_path):
    Net().save_weights(tmp_path / "n.npz")
    with np.load(tmp_path / "n.npz", allow_pickle=False) as npz:
        assert sorted(npz.files) == ["a", "fc/W", "fc/b", "z"]


def test_load_into_lazy_layer_takes_the_file_shapes(tmp_path):
    net = Net()
    net.save_weights(tmp_path / "n.npz")

    class Lazy(Net):
        def __init__(self):
            super().__init__()
            self.fc = L.Linear(2)

    lazy = Lazy()
    lazy.load_weights(tmp_path / "n.npz")
    assert lazy.fc.W.shape == (3, 2)


def test_save_into_a_missing_directory_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Net().save_weights(tmp_path / "no" / "w.npz")


def test_save_of_uninitialised_layer_names_the_empty_parameters(tmp_path):
    with pytest.raises(ValueError, match="W have no data yet"):
        L.Linear(3).save_weights(tmp_path / "x.npz")
    assert not os.path.exists(tmp_path / "x.npz")


def _saved(tmp_path, **arrays):
    path = tmp_path / "w.npz"
    np.savez(path, **arrays)
    return path


def _arrays(net):
    flat = {}
    net._flatten_params(flat)
    return {k: v.data for k, v in flat.items()}


def test_load_rejects_missing_keys_and_changes_nothing(tmp_path):
    net = Net()
    arrays = _arrays(Net())
    del arrays["fc/b"]
    before = net.fc.W.data.copy()
    with pytest.raises(ValueError, match=r"w\.npz.*missing from the file: fc/b"):
        net.load_weights(_saved(tmp_path, **arrays))
    np.testing.assert_array_equal(net.fc.W.data, before)


def test_load_rejects_extra_keys(tmp_path):
    arrays = _arrays(Net())
    arrays["fc/c"] = np.zeros(2)
    with pytest.raises(ValueError, match="not in the model: fc/c"):
        Net().load_weights(_saved(tmp_path, **arrays))


def test_load_rejects_wrong_shapes(tmp_path):
    arrays = _arrays(Net())
    arrays["fc/W"] = np.zeros((4, 2), np.float32)
    with pytest.raises(ValueError, match=r"fc/W: file \(4, 2\), model \(3, 2\)"):
        Net().load_weights(_saved(tmp_path, **arrays))


def test_load_rejects_a_corrupt_file(tmp_path):
    path = tmp_path / "bad.npz"
    path.write_bytes(b"this is not a zip archive at all" * 10)
    with pytest.raises(ValueError, match=r"cannot read .*bad\.npz.*corrupt or truncated"):
        Net().load_weights(path)


def test_load_rejects_a_single_array_file(tmp_path):
    path = tmp_path / "one.npy"
    np.save(path, np.ones(3))
    with pytest.raises(ValueError, match="one.npy.*single array"):
        Net().load_weights(path)


def test_load_rejects_a_truncated_file(tmp_path):
    net = L.Linear(50, in_size=40)
    path = tmp_path / "t.npz"
    net.save_weights(path)
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 30):
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=r"t\.npz.*corrupt or truncated"):
            L.Linear(50, in_size=40).load_weights(path)


def test_load_refuses_pickled_objects(tmp_path):
    path = tmp_path / "p.npz"
    arrays = _arrays(Net())
    arrays["a"] = np.array([{"evil": 1}, None], dtype=object)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="p.npz"):
        Net().load_weights(path)


@pytest.mark.parametrize("bad", [np.array(["1.0", "oops"]), np.array([1 + 2j, 3j]),
                                 np.array([b"ab", b"cd"])], ids=["str", "complex", "bytes"])
def test_a_bad_last_key_leaves_the_model_as_it_was(tmp_path, bad):
    net, source = Net(), Net()
    source.fc.W.data = source.fc.W.data + 1
    arrays = _arrays(source)
    arrays["a"] = bad  # "a" is loaded last
    before = [p.data.copy() for p in net.params()]
    with pytest.raises(ValueError, match=rf"w\.npz.*a holds {bad.dtype}.*real numbers"):
        net.load_weights(_saved(tmp_path, **arrays))
    for p, old in zip(net.params(), before):
        np.testing.assert_array_equal(p.data, old)


def test_an_object_array_names_its_key(tmp_path):
    arrays = _arrays(Net())
    arrays["fc/b"] = np.array([None, 1], dtype=object)
    with pytest.raises(ValueError, match=r"w\.npz.*key fc/b holds Python objects"):
        Net().load_weights(_saved(tmp_path, **arrays))


def test_an_unbuilt_linear_is_checked_and_converted(tmp_path):
    lazy = L.Linear(2)
    with pytest.raises(ValueError, match=r"W: file \(3, 5\), model \(in_size, 2\)"):
        lazy.load_weights(_saved(tmp_path, W=np.ones((3, 5)), b=np.zeros(2)))
    assert lazy.W.data is None and lazy.in_size is None
    with pytest.raises(ValueError, match=r"W: file \(3, 2, 1\)"):
        lazy.load_weights(_saved(tmp_path, W=np.ones((3, 2, 1)), b=np.zeros(2)))
    lazy.load_weights(_saved(tmp_path, W=np.ones((3, 2)), b=np.zeros(2)))
    assert lazy.W.dtype == np.float32 and lazy.in_size == 3  # the layer's dtype
    assert lazy(np.ones((4, 3), np.float32)).shape == (4, 2)


def test_an_unbuilt_conv2d_is_checked(tmp_path):
    arrays = {"W": np.ones((4, 3, 5, 5)), "b": np.zeros(4)}
    with pytest.raises(ValueError, match=r"W: file \(4, 3, 5, 5\), model \(4, in_channels, 3, 3\)"):
        L.Conv2d(4, kernel_size=3).load_weights(_saved(tmp_path, **arrays))
    arrays["W"] = np.ones((4, 3, 3, 3))
    conv = L.Conv2d(4, kernel_size=3)
    conv.load_weights(_saved(tmp_path, **arrays))
    assert conv.in_channels == 3 and conv.W.dtype == np.float32


def test_an_unbuilt_batch_norm_needs_one_size_for_its_four_vectors(tmp_path):
    arrays = {"avg_mean": np.zeros(3), "avg_var": np.ones(3), "gamma": np.ones(4),
              "beta": np.zeros(3)}
    bn = L.BatchNorm()
    with pytest.raises(ValueError, match=r"gamma: file \(4,\), model \(channels,\) with "
                                         r"channels = 3"):
        bn.load_weights(_saved(tmp_path, **arrays))
    assert bn.gamma.data is None and not hasattr(bn, "channels")
    arrays["gamma"] = np.ones(3, np.int64)
    bn.load_weights(_saved(tmp_path, **arrays))
    assert bn.gamma.dtype == np.float32 and bn.avg_var.dtype == np.float64


def test_load_of_missing_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.npz"):
        Net().load_weights(tmp_path / "nothing.npz")


def test_failing_save_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "keep.npz"
    old = Net()
    old.save_weights(path)
    original = path.read_bytes()

    def broken(file, **arrays):
        file.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", broken)
    with pytest.raises(OSError, match="disk full"):
        Net().save_weights(path)
    assert path.read_bytes() == original
    assert os.listdir(tmp_path) == ["keep.npz"]  # no temporary file left behind


def test_saved_file_gets_ordinary_permissions(tmp_path):
    path = tmp_path / "mode.npz"
    Net().save_weights(path)
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask


def test_layer_without_super_init_still_registers():
    class Careless(L.Layer):
        def __init__(self):
            self.w = Parameter(np.ones(1))

    assert len(list(Careless().params())) == 1



# =============================================================================
# BatchNorm state and EmbedID initialisation
# =============================================================================


def test_batch_norm_running_statistics_are_state_not_parameters(tmp_path):
    layer = L.BatchNorm()
    x = np.random.RandomState(0).randn(8, 3).astype(np.float32) * 2 + 5
    y = layer(x)
    assert y.dtype == np.float32
    assert [p.name for p in layer.params()] == ["gamma", "beta"]
    assert not isinstance(layer.avg_mean, Parameter) and isinstance(layer.avg_mean, Variable)
    mu, var = x.mean(axis=0), x.var(axis=0, ddof=1)
    np.testing.assert_allclose(layer.avg_mean.data, 0.1 * mu, rtol=1e-5)
    np.testing.assert_allclose(layer.avg_var.data, 0.9 + 0.1 * var, rtol=1e-5)
    assert layer.avg_mean.dtype == np.float32
    # Test mode normalises with the running statistics.
    with dezero.test_mode():
        y = layer(x)
    want = (x - layer.avg_mean.data) / np.sqrt(layer.avg_var.data + 2e-5)
    np.testing.assert_allclose(y.data, want, rtol=1e-5, atol=1e-5)
    # The statistics are saved and loaded with the weights.
    layer.save_weights(tmp_path / "bn.npz")
    other = L.BatchNorm()
    other.load_weights(tmp_path / "bn.npz")
    np.testing.assert_array_equal(other.avg_var.data, layer.avg_var.data)
    flat = {}
    layer._flatten_params(flat)
    assert list(flat) == ["avg_mean", "avg_var", "gamma", "beta"]


def test_embed_id_is_float32_normal():
    layer = L.EmbedID(1000, 20)
    assert layer.W.dtype == np.float32 and layer.W.shape == (1000, 20)
    assert abs(layer.W.data.std() - 1) < 0.02


# =============================================================================
# Inputs that once gave a silent wrong result or a bare error
# =============================================================================


@pytest.mark.parametrize("cls", [L.RNN, L.LSTM])
@pytest.mark.parametrize("first, second", [(1, 5), (5, 1)])
def test_recurrent_layers_refuse_a_carried_state_of_another_batch_size(cls, first, second):
    layer = cls(3)
    layer(np.zeros((first, 4), np.float32))
    with pytest.raises(ValueError, match=rf"{cls.__name__}: the carried state is for a batch "
                                         rf"of {first}, the input is a batch of {second}.*"
                                         r"reset_state\(\)"):
        layer(np.zeros((second, 4), np.float32))
    layer.reset_state()
    assert layer(np.zeros((second, 4), np.float32)).shape == (second, 3)
    assert layer(Variable(np.zeros((second, 4), np.float32))).shape == (second, 3)


def test_torch_refuses_a_hidden_state_of_another_batch_size_too(torch):
    rnn = torch.nn.RNN(4, 3, batch_first=True)
    with pytest.raises(RuntimeError):
        rnn(torch.zeros(5, 1, 4), torch.zeros(1, 1, 3))


@pytest.mark.parametrize("shape", [(1, 3), (1, 2, 1, 1)], ids=str)
def test_batch_norm_of_one_value_per_channel_in_training_gives_beta_with_a_warning(shape):
    # As the book and Chainer compute it (PyTorch refuses it); dezero raised ValueError.
    layer = L.BatchNorm()
    layer(np.ones((2,) + shape[1:], np.float32))  # initialises beta, here zeros
    layer.beta.data = np.arange(1, shape[1] + 1, dtype=np.float32)
    with pytest.warns(RuntimeWarning, match=rf"batch_norm: x of shape {re.escape(str(shape))} "
                                            r"has one value per channel in training"):
        y = layer(np.random.RandomState(1).randn(*shape).astype(np.float32))
    np.testing.assert_array_equal(y.data.reshape(-1), layer.beta.data)
    with dezero.test_mode():  # the running statistics normalise a single example
        assert layer(np.ones(shape, np.float32)).shape == shape
    assert layer(np.ones((1, shape[1], 2, 2) if len(shape) == 4 else (2, 3),
                         np.float32)).data.shape  # two values per channel train


@pytest.mark.parametrize("shape", [(0, 3), (0, 2, 4, 4)], ids=str)
def test_batch_norm_of_an_empty_batch_is_empty_and_keeps_the_running_statistics(shape):
    layer = L.BatchNorm()
    layer(rand(4, shape[1]) if len(shape) == 2 else rand(4, shape[1], 2, 2))
    stats = layer.avg_mean.data.copy(), layer.avg_var.data.copy()
    x = Variable(np.zeros(shape))
    y = layer(x)
    assert y.shape == shape
    F.sum(y).backward()
    assert x.grad.shape == shape and not layer.gamma.grad.data.any()
    np.testing.assert_array_equal(layer.avg_mean.data, stats[0])
    np.testing.assert_array_equal(layer.avg_var.data, stats[1])


def test_torch_gives_an_empty_output_for_an_empty_batch_too(torch):
    assert torch.nn.BatchNorm1d(3)(torch.zeros(0, 3)).shape == (0, 3)


def test_a_layer_referring_back_to_its_parent_is_walked_once(tmp_path):
    model = dezero.Model()
    model.l1 = L.Linear(2, in_size=3)
    model.l1.parent = model  # a back reference, as a tree of layers may keep
    params = list(model.params())
    assert params == [model.l1.W, model.l1.b]
    model.cleargrads()
    model.to_cpu()
    path = model.save_weights(tmp_path / "w.npz")
    assert sorted(np.load(path).files) == ["l1/W", "l1/b"]
    model.load_weights(path)
    assert "l1: Linear" in repr(model)


@pytest.mark.parametrize("layer, value", [
    (lambda: L.Linear(2), [[1.0, 2.0]]), (lambda: L.Linear(2), 3.0),
    (lambda: L.Conv2d(2, 3), [[[[1.0]]]]), (lambda: L.BatchNorm(), [[1.0, 2.0]]),
    (lambda: L.RNN(2), [[1.0]]), (lambda: L.LSTM(2), (1.0, 2.0))], ids=str)
def test_layers_name_themselves_for_an_input_that_is_no_array(layer, value):
    layer = layer()
    with pytest.raises(TypeError, match=rf"{type(layer).__name__}: the input must be a "
                                        r"Variable or an array, got .*np\.asarray"):
        layer(value)


@pytest.mark.parametrize("layer, shape", [(L.Linear(2), ()), (L.Conv2d(2, 3), (1, 3, 3)),
                                          (L.BatchNorm(), (4,)), (L.RNN(2), (4,))], ids=str)
def test_layers_name_themselves_for_an_input_with_too_few_axes(layer, shape):
    with pytest.raises(ValueError, match=rf"{type(layer).__name__}: the input needs at "
                                         rf"least \d axes, got shape"):
        layer(np.ones(shape, np.float32))


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_load_names_the_file_for_damage_that_zipfile_calls_unsupported(tmp_path, field):
    # zipfile raised a bare NotImplementedError ("That compression method is not
    # supported", "zip file version 21.0") past load_weights' own error.
    path = L.Linear(3, in_size=2).save_weights(tmp_path / "w.npz")
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(damaged(data, field))
    with pytest.raises(ValueError, match=r"load_weights: cannot read .*w\.npz.*corrupt"):
        L.Linear(3, in_size=2).load_weights(path)


def test_step60s_float64_sin_curve_leaves_its_float32_lstm_float32():
    # Step 60 feeds SinCurve's float64 values to a float32 LSTM and Linear: the
    # first Adam update made every weight float64.
    from dezero import SeqDataLoader, optimizers
    np.random.seed(0)
    model = dezero.Model()
    model.rnn, model.fc = L.LSTM(8), L.Linear(1)
    optimizer = optimizers.Adam().setup(model)
    loader = SeqDataLoader(dezero.datasets.SinCurve(train=True), batch_size=4)
    loss = 0
    for i, (x, t) in zip(range(6), loader):
        assert x.dtype == np.float64
        loss += F.mean_squared_error(model.fc(model.rnn(x)), t)
        if i % 3 == 2:  # truncated backprop through time, as step 60
            model.cleargrads()
            loss.backward()
            loss.unchain_backward()
            optimizer.update()
    assert {p.dtype for p in model.params()} == {np.dtype(np.float32)}
    assert {v.dtype for v in optimizer.ms.values()} == {np.dtype(np.float32)}
