"""Models: Layers with a drawing helper, and ready-made networks.

Model adds `plot()` to Layer; Sequential and MLP stack layers; VGG16 and
ResNet50/101/152 are the classic image classifiers, with the book's layer names
so that its pretrained weight files load. Sits on layers.py.

    model = MLP((10, 3)); y = model(x); model.plot(x, to_file="mlp.png")
"""
import numpy as np

import dezero.functions as F
import dezero.layers as L
from dezero import cuda, utils
from dezero.core import Parameter, no_grad, test_mode
from dezero.downloads import DownloadError
from dezero.layers import Layer

# =============================================================================
# Model / Sequential / MLP
# =============================================================================


class Model(Layer):
    def plot(self, *inputs, to_file="model.png"):
        """Run forward on inputs and draw the graph of the output into to_file."""
        y = self.forward(*inputs)
        return utils.plot_dot_graph(y, verbose=True, to_file=to_file)


class Sequential(Model):
    """Calls the given layers (or functions) one after another."""

    def __init__(self, *layers):
        super().__init__()
        self.layers = []
        for i, layer in enumerate(layers):
            setattr(self, "l" + str(i), layer)
            self.layers.append(layer)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class MLP(Model):
    """Linear layers of the given output sizes, `activation` between them."""

    def __init__(self, fc_output_sizes, activation=F.sigmoid):
        super().__init__()
        self.activation = activation
        self.layers = []
        for i, out_size in enumerate(fc_output_sizes):
            layer = L.Linear(out_size)
            setattr(self, "l" + str(i), layer)
            self.layers.append(layer)

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


def _weights_file(url):
    """The local path of a pretrained weight file, downloaded into the cache
    directory when missing (offline: an error naming the file and where to put it)."""
    return utils.get_file(url)


def _load_pretrained(model, path):
    """Load a downloaded weight file into model. No sha256 of these files is
    published; an npz keeps the CRC-32 of every array, which reading it checks,
    and load_weights checks every key and shape. Not caught: damage to an array's
    npy header that leaves a readable but shifted or reshaped array."""
    try:
        model.load_weights(path)
    except ValueError as e:
        raise DownloadError(
            f"{type(model).__name__}(pretrained=True): the cached file {path} is damaged or "
            f"not the expected weights ({e})\nDelete it to download it again:\n  rm {path!r}",
            path=path, reason=str(e)) from e


# =============================================================================
# VGG16
# =============================================================================


class VGG16(Model):
    """VGG-16: 13 3x3 convolutions (conv1_1 ... conv5_3) and 3 linear layers
    (fc6, fc7, fc8) for 224x224 BGR images made by `VGG16.preprocess`."""

    WEIGHTS_PATH = "https://github.com/koki0702/dezero-models/releases/download/v0.1/vgg16.npz"

    def __init__(self, pretrained=False):
        super().__init__()
        weights = _weights_file(VGG16.WEIGHTS_PATH) if pretrained else None
        for name, channels in (("conv1_1", 64), ("conv1_2", 64),
                               ("conv2_1", 128), ("conv2_2", 128),
                               ("conv3_1", 256), ("conv3_2", 256), ("conv3_3", 256),
                               ("conv4_1", 512), ("conv4_2", 512), ("conv4_3", 512),
                               ("conv5_1", 512), ("conv5_2", 512), ("conv5_3", 512)):
            setattr(self, name, L.Conv2d(channels, kernel_size=3, stride=1, pad=1))
        self.fc6 = L.Linear(4096)
        self.fc7 = L.Linear(4096)
        self.fc8 = L.Linear(1000)
        if weights is not None:
            _load_pretrained(self, weights)

    def forward(self, x):
        for stage in (("conv1_1", "conv1_2"), ("conv2_1", "conv2_2"),
                      ("conv3_1", "conv3_2", "conv3_3"), ("conv4_1", "conv4_2", "conv4_3"),
                      ("conv5_1", "conv5_2", "conv5_3")):
            for name in stage:
                x = F.relu(getattr(self, name)(x))
            x = F.pooling(x, 2, 2)
        x = F.reshape(x, (x.shape[0], -1))
        x = F.dropout(F.relu(self.fc6(x)))
        x = F.dropout(F.relu(self.fc7(x)))
        return self.fc8(x)

    @staticmethod
    def preprocess(image, size=(224, 224), dtype=np.float32):
        """A PIL image -> a (3, H, W) BGR array minus the training images' mean."""
        image = image.convert("RGB")
        if size:
            image = image.resize(size)
        image = np.asarray(image, dtype=dtype)[:, :, ::-1]  # RGB -> BGR
        image = image - np.array([103.939, 116.779, 123.68], dtype=dtype)
        return image.transpose((2, 0, 1))


# =============================================================================
# ResNet: ResNet, ResNet50, ResNet101, ResNet152, BuildingBlock, BottleneckA/B
# =============================================================================


class ResNet(Model):
    """The residual network (He et al. 2015) with n_layers 50, 101 or 152:
    conv1/bn1, four stages res2..res5 of bottleneck blocks, global average
    pooling, fc6."""

    WEIGHTS_PATH = "https://github.com/koki0702/dezero-models/releases/download/v0.1/resnet{}.npz"
    BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}

    def __init__(self, n_layers=152, pretrained=False):
        super().__init__()
        if n_layers not in self.BLOCKS:
            raise ValueError(f"ResNet: n_layers must be 50, 101 or 152, got {n_layers!r}")
        block = self.BLOCKS[n_layers]
        weights = _weights_file(ResNet.WEIGHTS_PATH.format(n_layers)) if pretrained else None
        # Keyword arguments throughout: Conv2d takes (out_channels, kernel_size,
        # stride, pad), not the (in, out, ...) order these sizes are often given in.
        self.conv1 = L.Conv2d(64, kernel_size=7, stride=2, pad=3, in_channels=3)
        self.bn1 = L.BatchNorm()
        self.res2 = BuildingBlock(block[0], 64, 64, 256, 1)
        self.res3 = BuildingBlock(block[1], 256, 128, 512, 2)
        self.res4 = BuildingBlock(block[2], 512, 256, 1024, 2)
        self.res5 = BuildingBlock(block[3], 1024, 512, 2048, 2)
        self.fc6 = L.Linear(1000)
        if weights is not None:
            _load_pretrained(self, weights)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.pooling(x, kernel_size=3, stride=2)
        x = self.res2(x)
        x = self.res3(x)
        x = self.res4(x)
        x = self.res5(x)
        x = _global_average_pooling_2d(x)
        return self.fc6(x)


class ResNet152(ResNet):
    def __init__(self, pretrained=False):
        super().__init__(152, pretrained)


class ResNet101(ResNet):
    def __init__(self, pretrained=False):
        super().__init__(101, pretrained)


class ResNet50(ResNet):
    def __init__(self, pretrained=False):
        super().__init__(50, pretrained)


def _global_average_pooling_2d(x):
    """(N, C, H, W) -> (N, C): the mean over each feature map."""
    return F.average(x, axis=(2, 3))


class BuildingBlock(Layer):
    """One stage: a BottleneckA (`a`, changes channels and stride) followed by
    n_layers - 1 BottleneckB (`b1`, `b2`, ...)."""

    def __init__(self, n_layers=None, in_channels=None, mid_channels=None,
                 out_channels=None, stride=None, downsample_fb=None):
        super().__init__()
        self.a = BottleneckA(in_channels, mid_channels, out_channels, stride, downsample_fb)
        self._forward = ["a"]
        for i in range(n_layers - 1):
            name = f"b{i + 1}"
            setattr(self, name, BottleneckB(out_channels, mid_channels))
            self._forward.append(name)

    def forward(self, x):
        for name in self._forward:
            x = getattr(self, name)(x)
        return x


class BottleneckA(Layer):
    """1x1 -> 3x3 -> 1x1 convolutions plus a 1x1 projection of the shortcut;
    reduces the resolution by `stride`. downsample_fb=True puts the stride on the
    3x3 convolution (Facebook's variant) instead of the first 1x1 (the original)."""

    def __init__(self, in_channels, mid_channels, out_channels, stride=2, downsample_fb=False):
        super().__init__()
        stride_1x1, stride_3x3 = (1, stride) if downsample_fb else (stride, 1)
        self.conv1 = L.Conv2d(mid_channels, 1, stride_1x1, 0, nobias=True,
                              in_channels=in_channels)
        self.bn1 = L.BatchNorm()
        self.conv2 = L.Conv2d(mid_channels, 3, stride_3x3, 1, nobias=True,
                              in_channels=mid_channels)
        self.bn2 = L.BatchNorm()
        self.conv3 = L.Conv2d(out_channels, 1, 1, 0, nobias=True, in_channels=mid_channels)
        self.bn3 = L.BatchNorm()
        self.conv4 = L.Conv2d(out_channels, 1, stride, 0, nobias=True, in_channels=in_channels)
        self.bn4 = L.BatchNorm()

    def forward(self, x):
        h1 = F.relu(self.bn1(self.conv1(x)))
        h1 = F.relu(self.bn2(self.conv2(h1)))
        h1 = self.bn3(self.conv3(h1))
        h2 = self.bn4(self.conv4(x))
        return F.relu(h1 + h2)


class BottleneckB(Layer):
    """1x1 -> 3x3 -> 1x1 convolutions added to the unchanged input."""

    def __init__(self, in_channels, mid_channels):
        super().__init__()
        self.conv1 = L.Conv2d(mid_channels, 1, 1, 0, nobias=True, in_channels=in_channels)
        self.bn1 = L.BatchNorm()
        self.conv2 = L.Conv2d(mid_channels, 3, 1, 1, nobias=True, in_channels=mid_channels)
        self.bn2 = L.BatchNorm()
        self.conv3 = L.Conv2d(in_channels, 1, 1, 0, nobias=True, in_channels=mid_channels)
        self.bn3 = L.BatchNorm()

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + x)


# =============================================================================
# GPT
# =============================================================================


class GPT(Model):
    """A decoder-only transformer as GPT-2: token and position embeddings, n_layer
    pre-norm TransformerBlocks, a final LayerNorm, and logits through the token
    embedding itself (tied weights): model(ids) of shape (B, T) -> (B, T, vocab_size).

    Initialised as GPT-2: weights ~ N(0, 0.02), biases 0, and the projections that
    end each residual branch (attn.proj, mlp.proj) ~ N(0, 0.02 / sqrt(2 * n_layer)),
    so the residual stream's variance does not grow with depth.

        model = GPT(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128)
        loss = F.softmax_cross_entropy(model(x), t)       # x, t: int arrays (B, T)
    """

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout=0.0,
                 dtype=np.float32):
        for name, size, least in (("vocab_size", vocab_size, 1), ("block_size", block_size, 1),
                                  ("n_layer", n_layer, 0), ("n_embd", n_embd, 1)):
            if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < least:
                # n_layer=-1 made a model of no blocks, in silence
                raise ValueError(f"GPT: {name} must be an int >= {least}, got {size!r}")
        super().__init__()
        self.vocab_size, self.block_size = vocab_size, block_size
        self.dropout = dropout
        self.wte = L.EmbedID(vocab_size, n_embd, dtype=dtype)
        self.wpe = L.EmbedID(block_size, n_embd, dtype=dtype)
        self.blocks = L.LayerList(L.TransformerBlock(n_embd, n_head, dropout, dtype=dtype)
                                  for _ in range(n_layer))
        self.ln_f = L.LayerNorm(n_embd, dtype=dtype)
        residual_std = 0.02 / np.sqrt(2 * max(n_layer, 1))  # no projection when 0
        for name, param in self._named():
            if isinstance(param, Parameter) and param.ndim == 2:
                std = residual_std if name.endswith("proj/W") else 0.02
                param.data = L._randn(np, param.shape, std, dtype)
            elif name.endswith("/b"):
                param.data = np.zeros_like(param.data)

    def forward(self, ids):
        ids = self._check_ids(ids)
        # The first T rows of the position table (the rows of arange(T)): a slice, so a
        # trace may keep T symbolic, where arange(T) would read it as a number.
        x = self.wte(ids) + self.wpe.W[:ids.shape[1]]
        x = L._dropout(x, self.dropout)
        for block in self.blocks:
            x = block(x)
        return F.matmul(self.ln_f(x), F.transpose(self.wte.W))

    def _check_ids(self, ids, crop=False):
        if isinstance(ids, (list, tuple)):
            ids = cuda.get_array_module(self.wte.W.data).asarray(ids)
        if ids.ndim != 2 or ids.dtype.kind not in "iu":
            raise ValueError(f"GPT: ids must be integers of shape (B, T), got "
                             f"{ids.dtype} of shape {ids.shape}; e.g. ids[None] for "
                             f"one sequence")
        if ids.shape[1] == 0:  # attention would take a softmax over no keys
            raise ValueError(f"GPT: ids of shape {ids.shape} hold no tokens; give at least "
                             f"one per sequence, e.g. np.zeros((B, 1), np.int64) to start from")
        if ids.shape[1] > self.block_size and not crop:
            raise ValueError(f"GPT: a context of {ids.shape[1]} tokens is longer than "
                             f"block_size={self.block_size}; pass the last "
                             f"{self.block_size} (ids[:, -{self.block_size}:])")
        return ids

    def generate(self, ids, max_new_tokens, temperature=1.0, top_k=None, rng=None):
        """ids (B, T) followed by max_new_tokens tokens sampled one at a time from
        softmax(logits / temperature), over the top_k likeliest where top_k is given;
        the context is cropped to the last block_size tokens. rng: a
        numpy Generator (or a seed); None draws from numpy's global random state."""
        if not 0 < temperature < np.inf:  # NaN too: it sampled token 0, always
            raise ValueError(f"GPT.generate: temperature must be > 0 and finite, got "
                             f"{temperature}")
        if top_k is not None and not (isinstance(top_k, (int, np.integer)) and
                                      1 <= top_k <= self.vocab_size):
            raise ValueError(f"GPT.generate: top_k must be an int in 1..{self.vocab_size}, "
                             f"got {top_k!r}")
        rng = np.random.default_rng(rng) if isinstance(rng, (int, np.integer)) else rng
        uniform = np.random.random_sample if rng is None else rng.random
        xp = cuda.get_array_module(self.wte.W.data)
        ids = self._check_ids(xp.asarray(ids), crop=True)
        if max_new_tokens > 0 and np.iinfo(ids.dtype).max < self.vocab_size - 1:
            raise ValueError(f"GPT.generate: ids of dtype {ids.dtype} cannot hold the tokens "
                             f"up to {self.vocab_size - 1} of the vocabulary; widen them, "
                             f"e.g. ids.astype(np.int64)")
        with no_grad(), test_mode():
            for _ in range(max_new_tokens):
                logits = self(ids[:, -self.block_size:])
                last = cuda.as_numpy(logits.data[:, -1, :]).astype(np.float64)
                if top_k is not None:
                    kth = np.sort(last, axis=-1)[:, -top_k, None]
                    last = np.where(last < kth, -np.inf, last)
                # The maximum first: logits / a small temperature would overflow to inf
                # (inf - inf is NaN); a difference that overflows is -inf, probability 0.
                with np.errstate(over="ignore"):
                    probs = np.exp((last - last.max(axis=-1, keepdims=True)) / temperature)
                cumulative = np.cumsum(probs, axis=-1)
                u = uniform(len(ids))[:, None] * cumulative[:, -1:]
                chosen = np.minimum((cumulative <= u).sum(axis=-1), self.vocab_size - 1)
                ids = xp.concatenate([ids, xp.asarray(chosen[:, None], dtype=ids.dtype)], 1)
        return ids
