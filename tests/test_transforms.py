"""Transforms: array transforms always; PIL image transforms when Pillow is installed."""
import sys

import numpy as np
import pytest

from dezero import transforms as T


@pytest.fixture
def global_rng():
    state = np.random.get_state()
    yield
    np.random.set_state(state)


# =============================================================================
# Array transforms
# =============================================================================
def test_compose_applies_in_order():
    f = T.Compose([lambda x: x + 1, lambda x: x * 10])
    assert f(2) == 30
    assert T.Compose()(5) == 5 and T.Compose([])(5) == 5


def test_normalize_scalar_keeps_float32():
    x = np.array([0., 127.5, 255.], dtype=np.float32)
    y = T.Normalize(np.float64(0.), np.float64(255.))(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [0., 0.5, 1.])
    np.testing.assert_allclose(T.Normalize(mean=0.5, std=0.5)(np.float32([0., 1.])), [-1., 1.])


def test_normalize_defaults_change_nothing():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(T.Normalize()(x), x)


def test_normalize_per_channel():
    x = np.ones((3, 2, 2), dtype=np.float32)
    y = T.Normalize(mean=[1., 2., 3.], std=[1., 2., 4.])(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y[:, 0, 0], [0., -0.5, -0.5])
    np.testing.assert_allclose(T.Normalize(mean=[1.])(x), np.zeros_like(x))


def test_normalize_integer_input_gives_float32():
    y = T.Normalize(mean=[0.5, 0.5], std=0.5)(np.zeros((2, 1), dtype=np.uint8))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, -np.ones((2, 1)))


def test_normalize_channel_count_mismatch():
    with pytest.raises(ValueError, match='2 values but the array has 3 channels'):
        T.Normalize(mean=[0., 1.])(np.zeros((3, 4, 4), dtype=np.float32))


def test_flatten_astype_tofloat_toint():
    x = np.arange(6, dtype=np.uint8).reshape(1, 2, 3)
    np.testing.assert_array_equal(T.Flatten()(x), np.arange(6))
    assert T.AsType()(x).dtype == np.float32
    assert T.AsType(np.float64)(x).dtype == np.float64
    assert T.ToFloat is T.AsType and T.ToFloat()(x).dtype == np.float32
    y = T.ToInt()(np.array([1.7, -2.2]))
    assert y.dtype == np.dtype(int) and y.tolist() == [1, -2]


def test_random_horizontal_flip_on_arrays(global_rng):
    x = np.arange(6).reshape(1, 2, 3)
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=1.0)(x), x[:, :, ::-1])
    np.testing.assert_array_equal(T.RandomHorizontalFlip(p=0.0)(x), x)


# =============================================================================
# PIL image transforms
# =============================================================================
def test_image_transforms_without_pillow_name_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, 'PIL', None)        # makes `import PIL` fail
    with pytest.raises(ImportError, match='pip install pillow'):
        T.Resize(4)(object())
    with pytest.raises(ImportError, match='pip install pillow'):
        T.ToPIL()(np.zeros((3, 2, 2), dtype=np.uint8))


def rgb_image():
    Image = pytest.importorskip('PIL.Image')
    array = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)   # H=4, W=6
    return Image.fromarray(array), array


def test_convert():
    img, array = rgb_image()
    assert T.Convert('L')(img).mode == 'L'
    bgr = np.asarray(T.Convert('BGR')(img))
    np.testing.assert_array_equal(bgr, array[:, :, ::-1])


def test_resize_and_center_crop():
    img, array = rgb_image()
    assert T.Resize(3)(img).size == (3, 3)
    assert T.Resize((5, 2))(img).size == (5, 2)          # (width, height)
    cropped = T.CenterCrop((2, 2))(img)
    assert cropped.size == (2, 2)
    np.testing.assert_array_equal(np.asarray(cropped), array[1:3, 2:4])
    with pytest.raises(ValueError, match='pair'):
        T.Resize((1, 2, 3))


def test_to_array_and_back():
    img, array = rgb_image()
    x = T.ToArray()(img)
    assert x.dtype == np.float32 and x.shape == (3, 4, 6)
    np.testing.assert_array_equal(x, array.transpose(2, 0, 1))
    assert T.ToArray()(x) is x
    back = T.ToPIL()(T.AsType(np.uint8)(x))
    np.testing.assert_array_equal(np.asarray(back), array)
    gray = T.ToArray(np.uint8)(T.Convert('L')(img))
    assert gray.shape == (1, 4, 6)
    assert T.ToPIL()(gray).mode == 'L'


def test_to_pil_names_the_dtype_fix():
    pytest.importorskip('PIL')
    with pytest.raises(TypeError, match=r'AsType\(np.uint8\)'):
        T.ToPIL()(np.zeros((3, 2, 2), dtype=np.float64))
    with pytest.raises(TypeError, match='PIL image or a numpy array'):
        T.ToArray()([1, 2])


def test_random_horizontal_flip_on_images(global_rng):
    img, array = rgb_image()
    np.testing.assert_array_equal(np.asarray(T.RandomHorizontalFlip(1.0)(img)), array[:, ::-1])
    assert T.RandomHorizontalFlip(0.0)(img) is img
