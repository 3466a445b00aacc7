"""Stand-ins for downloaded data, so that the steps also run offline.

Shared by the MNIST steps (51-53; a script's own folder is on sys.path).
`load_mnist` returns dezero's MNIST when its files are in the cache or can be
downloaded; otherwise it says so and returns `SyntheticDigits`: seven-segment
digits drawn in the MNIST format (uint8 images of shape (1, 28, 28)).
    from standins import load_mnist
"""
import numpy as np

import dezero
from dezero.datasets import Dataset
from dezero.downloads import DownloadError
from dezero.transforms import Compose, Flatten, Normalize, ToFloat

# =============================================================================
# SyntheticDigits: seven-segment digits with jitter and noise
# =============================================================================
# Segments of a seven-segment display, as boxes (top, left, bottom, right) in
# a unit cell 1 wide and 2 high; scaled and shifted per image below.
_SEGMENTS = {
    "a": (0.0, 0.0, 0.15, 1.0), "b": (0.0, 0.85, 1.0, 1.0), "c": (1.0, 0.85, 2.0, 1.0),
    "d": (1.85, 0.0, 2.0, 1.0), "e": (1.0, 0.0, 2.0, 0.15), "f": (0.0, 0.0, 1.0, 0.15),
    "g": (0.925, 0.0, 1.075, 1.0),
}
_DIGITS = ["abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg"]


class SyntheticDigits(Dataset):
    """Digits 0-9 for offline runs: data uint8 (N, 1, 28, 28), label uint8 (N,).

    Each image has its own size, position, stroke width and noise, drawn from
    a fixed seed per split, so runs are reproducible.
    """

    def __init__(self, train=True, transform=None, target_transform=None, size=None):
        self.size = size or (2000 if train else 500)
        if transform is None:  # MNIST's default: 784 float32 values in [0, 1]
            transform = Compose([Flatten(), ToFloat(), Normalize(0.0, 255.0)])
        super().__init__(train, transform, target_transform)

    def prepare(self):
        rng = np.random.default_rng(0 if self.train else 1)
        labels = rng.integers(0, 10, self.size)
        images = np.zeros((self.size, 1, 28, 28), np.uint8)
        for n, digit in enumerate(labels):
            images[n, 0] = self._draw(digit, rng)
        self.data, self.label = images, labels.astype(np.uint8)

    @staticmethod
    def _draw(digit, rng):
        # Centred with a little jitter, as MNIST centres its digits.
        width, height = rng.uniform(9, 14), rng.uniform(16, 22)
        top = (28 - height) / 2 + rng.uniform(-2, 2)
        left = (28 - width) / 2 + rng.uniform(-2, 2)
        image = np.zeros((28, 28))
        for name in _DIGITS[digit]:
            t, l, b, r = _SEGMENTS[name]
            rows = slice(int(top + t * height / 2), int(np.ceil(top + b * height / 2)))
            cols = slice(int(left + l * width), int(np.ceil(left + r * width)))
            image[rows, cols] = rng.uniform(180, 255)
        image += rng.normal(0, 20, image.shape)
        return np.clip(image, 0, 255).astype(np.uint8)


# =============================================================================
# load_mnist: the real data when there is, the stand-in otherwise
# =============================================================================
def load_mnist(train=True, transform=None):
    """dezero.datasets.MNIST(train, transform), or SyntheticDigits when offline."""
    kwargs = {} if transform is None else {"transform": transform}
    try:
        return dezero.datasets.MNIST(train=train, **kwargs)
    except DownloadError as e:
        split = "train" if train else "test"
        print(f"MNIST ({split}) is not available, so this run uses a stand-in: "
              f"synthetic seven-segment digits in the MNIST format.")
        print("  " + str(e).replace("\n", "\n  "))
        return SyntheticDigits(train=train, **kwargs)
