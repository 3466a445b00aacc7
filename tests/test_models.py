"""Models: MLP training on the spiral, Sequential, plot, and the structure of
VGG16 and ResNet (names, sizes, pretrained weights without a network)."""
import urllib.error
import urllib.request

import numpy as np
import pytest
from zip_damage import FIELDS, damaged

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import optimizers
from dezero.downloads import DownloadError
from dezero.models import MLP, VGG16, Model, ResNet, ResNet50, ResNet101, ResNet152, Sequential

# =============================================================================
# MLP / Sequential / Model.plot
# =============================================================================


def test_mlp_learns_the_spiral():
    x, t = dezero.datasets.get_spiral(train=True)
    model = MLP((10, 3))
    model(x[:1])  # makes the weights; then draw them again from a local RNG
    rng = np.random.RandomState(0)
    for layer in model.layers:
        layer.W.data = (rng.randn(*layer.W.shape) * np.sqrt(1 / layer.W.shape[0])) \
            .astype(np.float32)
    optimizer = optimizers.SGD(lr=1.0).setup(model)
    batch_size = 30
    for _ in range(300):
        order = rng.permutation(len(x))
        for i in range(0, len(x), batch_size):
            batch = order[i:i + batch_size]
            loss = F.softmax_cross_entropy(model(x[batch]), t[batch])
            model.cleargrads()
            loss.backward()
            optimizer.update()
    with dezero.no_grad():
        y = model(x)
    assert y.dtype == np.float32
    assert all(p.dtype == np.float32 for p in model.params())
    assert float(F.accuracy(y, t).data) >= 0.95


def test_mlp_layers_and_activation():
    model = MLP((4, 3, 2), activation=F.relu)
    x = np.random.RandomState(0).randn(5, 6).astype(np.float32)
    y = model(x)
    assert y.shape == (5, 2)
    flat = {}
    model._flatten_params(flat)
    assert list(flat) == ["l0/W", "l0/b", "l1/W", "l1/b", "l2/W", "l2/b"]
    h = F.relu(F.linear(x, model.l0.W, model.l0.b))
    h = F.relu(F.linear(h, model.l1.W, model.l1.b))
    np.testing.assert_allclose(y.data, F.linear(h, model.l2.W, model.l2.b).data, rtol=1e-6)


def test_sequential_calls_layers_and_functions_in_order():
    model = Sequential(L.Linear(4), F.tanh, L.Linear(2))
    assert [p.data is None for p in model.params()] == [True, False, True, False]
    x = np.ones((3, 5), dtype=np.float32)
    y = model(x)
    want = model.l2(F.tanh(model.l0(x)))
    np.testing.assert_allclose(y.data, want.data)
    assert [p.shape for p in model.params()] == [(5, 4), (4,), (4, 2), (2,)]


def test_model_plot_writes_the_graph(tmp_path):
    model = MLP((3, 2))
    path = tmp_path / "mlp.dot"
    model.plot(np.ones((1, 4), dtype=np.float32), to_file=str(path))
    text = path.read_text()
    assert "Linear" in text and "Sigmoid" in text and "(1, 2) float32" in text


def test_model_save_and_load_round_trip(tmp_path):
    model = MLP((3, 2))
    x = np.ones((1, 4), dtype=np.float32)
    y = model(x)
    model.save_weights(tmp_path / "mlp.npz")
    other = MLP((3, 2))
    other.load_weights(tmp_path / "mlp.npz")
    np.testing.assert_array_equal(other(x).data, y.data)


# =============================================================================
# VGG16
# =============================================================================

VGG_CONVS = ["conv1_1", "conv1_2", "conv2_1", "conv2_2", "conv3_1", "conv3_2", "conv3_3",
             "conv4_1", "conv4_2", "conv4_3", "conv5_1", "conv5_2", "conv5_3"]


def vgg_keys():
    return [f"{name}/{p}" for name in VGG_CONVS + ["fc6", "fc7", "fc8"] for p in ("W", "b")]


def test_vgg16_has_the_book_layer_names_in_order():
    model = VGG16()
    assert isinstance(model, Model)
    flat = {}
    model._flatten_params(flat)
    assert list(flat) == vgg_keys()
    assert [getattr(model, n).out_channels for n in VGG_CONVS] == \
        [64] * 2 + [128] * 2 + [256] * 3 + [512] * 6
    assert model.fc8.out_size == 1000


def test_vgg16_preprocess_makes_bgr_minus_mean():
    Image = pytest.importorskip("PIL.Image")
    rgb = np.zeros((4, 6, 3), dtype=np.uint8)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 10, 20, 30
    image = VGG16.preprocess(Image.fromarray(rgb), size=(8, 5))
    assert image.shape == (3, 5, 8) and image.dtype == np.float32
    np.testing.assert_allclose(image[:, 0, 0], [30 - 103.939, 20 - 116.779, 10 - 123.68],
                               rtol=1e-6)


def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("DEZERO_CACHE_DIR", str(tmp_path))

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)


@pytest.mark.parametrize("make, file_name", [(VGG16, "vgg16.npz"), (ResNet50, "resnet50.npz")])
def test_pretrained_offline_names_the_file_and_where_to_put_it(monkeypatch, tmp_path,
                                                               make, file_name):
    offline(monkeypatch, tmp_path)
    with pytest.raises(DownloadError) as info:
        make(pretrained=True)
    message = str(info.value)
    assert file_name in message and str(tmp_path / file_name) in message


def vgg16_stand_in(path):
    """Writes a small stand-in for the 500 MB VGG16 file at path; returns its arrays.
    Every W of VGG16 takes its input size from the data, so arrays with an input
    size of 1 stand in for the real ones; the rest is true to size."""
    model = VGG16()
    arrays = {}
    for i, key in enumerate(vgg_keys()):
        layer_name, name = key.split("/")
        layer = getattr(model, layer_name)
        if name == "b":
            shape = layer.b.shape
        elif isinstance(layer, L.Conv2d):
            shape = (layer.out_channels, 1, 3, 3)
        else:
            shape = (1, layer.out_size)
        arrays[key] = np.full(shape, i, dtype=np.float32)
    np.savez(path, **arrays)
    return arrays


def test_pretrained_weights_in_the_cache_load_without_network(monkeypatch, tmp_path):
    offline(monkeypatch, tmp_path)
    arrays = vgg16_stand_in(tmp_path / "vgg16.npz")
    model = VGG16(pretrained=True)
    np.testing.assert_array_equal(model.fc8.b.data, arrays["fc8/b"])
    np.testing.assert_array_equal(model.conv1_1.W.data, arrays["conv1_1/W"])


def damage_fc8_b(data):
    start = data.index(b"fc8/b.npy") + 200  # inside the array's bytes
    data[start] ^= 0x01
    return data


@pytest.mark.parametrize("damage", [damage_fc8_b, lambda data: data[:len(data) // 2]] +
                         [lambda data, f=f: damaged(data, f) for f in sorted(FIELDS)],
                         ids=["one bit of an array", "cut short"] + sorted(FIELDS))
def test_a_damaged_weights_file_in_the_cache_says_to_delete_it(monkeypatch, tmp_path, damage):
    # No sha256 of the VGG16 file is published: the CRC-32 that the npz keeps of
    # every array, checked while reading it, stands in for one.
    offline(monkeypatch, tmp_path)
    path = tmp_path / "vgg16.npz"
    vgg16_stand_in(path)
    path.write_bytes(bytes(damage(bytearray(path.read_bytes()))))
    with pytest.raises(DownloadError) as info:
        VGG16(pretrained=True)
    message = str(info.value)
    assert f"the cached file {path} is damaged" in message
    assert f"rm {str(path)!r}" in message and info.value.path == str(path)


@pytest.fixture
def cheap_init(monkeypatch):
    """Constant initial weights: drawing tens of millions of normals would take
    most of these tests' time, and only shapes are checked."""
    monkeypatch.setattr(np.random, "randn",
                        lambda *shape: np.full(shape, 0.01, dtype=np.float32))


def test_vgg16_forward_on_a_small_image(cheap_init):
    model = VGG16()
    x = np.ones((1, 3, 32, 32), dtype=np.float32)
    with dezero.test_mode(), dezero.no_grad():
        y = model(x)
    assert y.shape == (1, 1000) and y.dtype == np.float32
    # Five 2x2 poolings take 32x32 to 1x1, so fc6 sees 512 features.
    assert model.fc6.W.shape == (512, 4096) and model.conv1_1.W.shape == (64, 3, 3, 3)


# =============================================================================
# ResNet
# =============================================================================


@pytest.mark.parametrize("make, count", [
    # The published sizes (25,557,032 and 44,549,160 parameters) plus the bias
    # of conv1, which this ResNet has.
    (ResNet50, 25_557_032 + 64),
    (ResNet101, 44_549_160 + 64),
])
def test_resnet_parameter_count_matches_the_published_one(cheap_init, make, count):
    model = make()
    with dezero.no_grad(), dezero.test_mode():  # one image: batch statistics need two
        y = model(np.ones((1, 3, 32, 32), dtype=np.float32))
    assert y.shape == (1, 1000) and y.dtype == np.float32
    assert sum(p.size for p in model.params()) == count


def test_resnet_layer_names_and_shapes(cheap_init):
    model = ResNet152()
    assert [len(getattr(model, f"res{i}")._forward) for i in (2, 3, 4, 5)] == [3, 8, 36, 3]
    block = model.res3
    assert block.a.conv1.W.shape == (128, 256, 1, 1) and block.a.conv1.stride == 2
    assert block.a.conv2.W.shape == (128, 128, 3, 3) and block.a.conv2.pad == 1
    assert block.a.conv4.W.shape == (512, 256, 1, 1) and block.a.conv4.b is None
    assert block.b7.conv3.W.shape == (512, 128, 1, 1)
    assert model.conv1.W.shape == (64, 3, 7, 7) and model.conv1.stride == 2
    flat = {}
    model._flatten_params(flat)
    assert list(flat)[:6] == ["conv1/W", "conv1/b", "bn1/avg_mean", "bn1/avg_var",
                              "bn1/gamma", "bn1/beta"]
    assert "res4/b35/bn3/avg_var" in flat and "res4/b36/conv1/W" not in flat
    with pytest.raises(ValueError, match="50, 101 or 152"):
        ResNet(34)
