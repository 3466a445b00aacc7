"""Transforms: small callables that a Dataset applies to each example.

transforms.py sits beside datasets.py: a Dataset calls `transform(x)` on each
data item and `target_transform(t)` on each label. The array transforms need
only numpy; the image ones take PIL images and import Pillow when first called.

    f = Compose([Flatten(), ToFloat(), Normalize(0., 255.)]); y = f(x)
"""
import numpy as np

from dezero.utils import pair


# =============================================================================
# Composition: Compose
# =============================================================================
class Compose:
    """Apply several transforms in order: Compose([f, g])(x) == g(f(x))."""

    def __init__(self, transforms=None):
        self.transforms = [] if transforms is None else list(transforms)

    def __call__(self, img):
        for t in self.transforms:
            img = t(img)
        return img


# =============================================================================
# Transforms for PIL images: Convert, Resize, CenterCrop, ToArray, ToPIL,
# RandomHorizontalFlip
# =============================================================================
def _pil_image(caller):
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(f'transforms.{caller} works on PIL images and needs Pillow: '
                          f'pip install pillow') from None
    return Image


class Convert:
    """Convert a PIL image to `mode` ('RGB', 'L', ...); 'BGR' gives RGB with R and B swapped."""

    def __init__(self, mode='RGB'):
        self.mode = mode

    def __call__(self, img):
        if self.mode == 'BGR':
            Image = _pil_image('Convert')
            r, g, b = img.convert('RGB').split()
            return Image.merge('RGB', (b, g, r))
        return img.convert(self.mode)


class Resize:
    """Resize a PIL image to size (width, height), or (size, size) for an int.

    mode: a PIL resampling filter; None means bilinear.
    """

    def __init__(self, size, mode=None):
        self.size = pair(size)
        self.mode = mode

    def __call__(self, img):
        mode = self.mode
        if mode is None:
            mode = _pil_image('Resize').Resampling.BILINEAR
        return img.resize(self.size, mode)


class CenterCrop:
    """Crop the centre of a PIL image to size (width, height), or (size, size) for an int."""

    def __init__(self, size):
        self.size = pair(size)

    def __call__(self, img):
        W, H = img.size
        OW, OH = self.size
        left, up = (W - OW) // 2, (H - OH) // 2
        return img.crop((left, up, left + OW, up + OH))


class ToArray:
    """PIL image (H, W, C) -> array (C, H, W) of `dtype`; a grayscale image gives C = 1.

    Arrays pass through unchanged.
    """

    def __init__(self, dtype=np.float32):
        self.dtype = dtype

    def __call__(self, img):
        if isinstance(img, np.ndarray):
            return img
        Image = _pil_image('ToArray')
        if not isinstance(img, Image.Image):
            raise TypeError(f'ToArray takes a PIL image or a numpy array, '
                            f'not {type(img).__name__}')
        array = np.asarray(img)
        if array.ndim == 2:
            array = array[:, :, np.newaxis]
        return array.transpose(2, 0, 1).astype(self.dtype)


class ToPIL:
    """Array (C, H, W) -> PIL image; C = 1 gives a grayscale image.

    Colour images need uint8 values: apply AsType(np.uint8) first.
    """

    def __call__(self, array):
        Image = _pil_image('ToPIL')
        if array.ndim != 3:
            raise ValueError(f'ToPIL takes an array of shape (C, H, W), got shape {array.shape}')
        data = array.transpose(1, 2, 0)
        if data.shape[2] == 1:
            data = data[:, :, 0]
        try:
            return Image.fromarray(data)
        except TypeError as e:
            raise TypeError(f'ToPIL: Pillow cannot make an image of {array.dtype} values with '
                            f'{array.shape[0]} channels ({e}); apply AsType(np.uint8) '
                            f'first') from e


class RandomHorizontalFlip:
    """Mirror left-right with probability p: a PIL image, or an array (..., H, W).

    The coin comes from the global numpy RNG, like DataLoader's shuffling.
    """

    def __init__(self, p=0.5):
        self.p = p

    def __call__(self, img):
        if np.random.rand() >= self.p:
            return img
        if isinstance(img, np.ndarray):
            return img[..., ::-1]
        Image = _pil_image('RandomHorizontalFlip')
        return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)


# =============================================================================
# Transforms for numpy arrays: Normalize, Flatten, AsType, ToFloat, ToInt
# =============================================================================
class Normalize:
    """(array - mean) / std, with one mean and std for all values or one per channel.

    A sequence of means (or stds) runs along the first axis (channels). The
    result keeps a floating array's dtype; an integer array gives float32.
    """

    def __init__(self, mean=0, std=1):
        self.mean = mean
        self.std = std

    def __call__(self, array):
        array = np.asarray(array)
        # Cast the statistics to the array's dtype so that float32 stays
        # float32 (a numpy float64 scalar would otherwise promote it).
        dtype = array.dtype if np.issubdtype(array.dtype, np.floating) else np.float32
        mean = self._per_channel(self.mean, array, dtype, 'mean')
        std = self._per_channel(self.std, array, dtype, 'std')
        return (array.astype(dtype, copy=False) - mean) / std

    @staticmethod
    def _per_channel(value, array, dtype, what):
        value = np.asarray(value, dtype=dtype)
        if value.ndim == 0:
            return value
        if value.ndim != 1 or (len(value) != 1 and len(value) != len(array)):
            raise ValueError(f'Normalize: {what} has {value.size} values but the array has '
                             f'{len(array)} channels (shape {array.shape}); give one value '
                             f'or one per channel')
        return value.reshape((-1,) + (1,) * (array.ndim - 1))


class Flatten:
    """Flatten an array to one dimension."""

    def __call__(self, array):
        return array.flatten()


class AsType:
    """Cast an array to `dtype`."""

    def __init__(self, dtype=np.float32):
        self.dtype = dtype

    def __call__(self, array):
        return array.astype(self.dtype)


ToFloat = AsType


class ToInt(AsType):
    """Cast an array to `dtype` (default: int)."""

    def __init__(self, dtype=int):
        self.dtype = dtype
