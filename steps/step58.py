"""Step 58: a famous CNN, VGG16, with pretrained weights.

VGG16 stacks 13 3x3 convolutions (with ReLU, in five blocks each ending in
2x2 max pooling) and three fully connected layers, ending in the 1000
ImageNet classes. `dezero.models.VGG16(pretrained=True)` downloads the
trained weights (about 530 MB) into the cache directory once;
`VGG16.preprocess` resizes a PIL image to 224x224, reorders it to BGR
channels first and subtracts the training mean. Offline this step says what
to download and where, then runs an untrained VGG16 on a small random image
to show the shapes flowing through it.
Run: python steps/step58.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
from dezero.downloads import DownloadError
from dezero.models import VGG16

IMAGE_URL = "https://github.com/oreilly-japan/deep-learning-from-scratch-3/raw/images/zebra.jpg"


def classify_with_pretrained():
    """Classify the zebra photo; returns False (after saying why) when something is missing."""
    try:
        from PIL import Image
    except ImportError:
        print("skipped the pretrained run: Pillow is not installed (pip install pillow)")
        return False
    paths, failures = {}, []
    for what, url in (("weights", VGG16.WEIGHTS_PATH), ("photo", IMAGE_URL)):
        try:
            paths[what] = dezero.utils.get_file(url)
        except DownloadError as e:
            failures.append(str(e))
    if failures:
        print("skipped the pretrained run: these files are missing and cannot be downloaded.")
        for message in failures:
            print("  " + message.replace("\n", "\n  "))
        return False

    model = VGG16(pretrained=True)  # finds the weights in the cache now
    x = VGG16.preprocess(Image.open(paths["photo"]))[np.newaxis]  # add the batch axis
    with dezero.test_mode(), dezero.no_grad():
        y = model(x)
    predict_id = int(np.argmax(y.data))
    labels = dezero.datasets.ImageNet.labels()
    print(f"pretrained VGG16 says: {labels[predict_id]} (class {predict_id})")
    return True


if not classify_with_pretrained():
    print("stand-in: an untrained VGG16 on a random 32x32 image (predictions mean nothing)")
    np.random.seed(0)
    model = VGG16()
    x = np.random.rand(1, 3, 32, 32).astype(np.float32)
    with dezero.test_mode(), dezero.no_grad():
        y = model(x)
    convs = sum(1 for name in vars(model) if name.startswith("conv"))
    print(f"{convs} convolution layers; input {x.shape} -> output {y.shape}")
