"""Convolution and pooling ops: conv2d, deconv2d, pooling, average_pooling,
im2col and col2im, plus the teaching versions conv2d_simple and pooling_simple.

Images are (N, C, H, W) arrays. Every op works through the same two array
helpers, im2col_array and col2im_array, so numpy and cupy run the same code.
Sits on functions.py; layers.Conv2d and the CNN examples build on it.

    y = F.conv2d(x, W, b, stride=1, pad=1)   # x: (N, C, H, W), W: (OC, C, KH, KW)
"""
import numpy as np

from dezero import cuda
from dezero.core import Function, as_variable
from dezero.functions import linear, sum
from dezero.utils import get_conv_outsize, get_deconv_outsize, pair

# =============================================================================
# Array helpers: im2col_array, col2im_array
# =============================================================================


def _check_image(op, x):
    if x.ndim != 4:
        raise ValueError(f"{op}: expected images of shape (N, C, H, W), got shape "
                         f"{x.shape}; add the missing axes, e.g. x.reshape(1, 1, H, W)")


def _outsize(op, size, kernel_size, stride, pad):
    (h, w), (kh, kw), (sh, sw), (ph, pw) = size, kernel_size, stride, pad
    oh, ow = get_conv_outsize(h, kh, sh, ph), get_conv_outsize(w, kw, sw, pw)
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: a {kh}x{kw} kernel does not fit a {h}x{w} image padded "
                         f"by {(ph, pw)}; use a smaller kernel or more padding")
    return oh, ow


_LOWEST = {"kernel_size": 1, "stride": 1, "pad": 0}
_WHY = {"kernel_size": "a window of no pixels has no value",
        "stride": "stride=1 moves the window one pixel at a time",
        "pad": "pad=0 adds no border"}


def _pair(op, name, value):
    """A kernel_size, stride or pad as a pair of ints in range (a stride of 0 would
    divide the output size by zero, a kernel of 0 average no pixels)."""
    if isinstance(value, list):
        value = tuple(value)
    items = value if isinstance(value, tuple) and len(value) == 2 else (value,)
    if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items):
        raise TypeError(f"{op}: {name} must be an int or a pair of ints, got {value!r}")
    value = tuple(int(v) for v in items)
    value = value * 2 if len(value) == 1 else value
    if min(value) < _LOWEST[name]:
        raise ValueError(f"{op}: {name} must be at least {_LOWEST[name]}, got {value}; "
                         f"{_WHY[name]}")
    return value


def _stride(op, stride):
    return _pair(op, "stride", stride)


def im2col_array(img, kernel_size, stride, pad, to_matrix=True, pad_value=0):
    """The kernel-sized patches of img (N, C, H, W) as (N, C, KH, KW, OH, OW), or as
    a (N * OH * OW, C * KH * KW) matrix with to_matrix."""
    kernel_size, stride, pad = pair(kernel_size), pair(stride), pair(pad)
    n, c, h, w = img.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, pad
    oh, ow = _outsize("im2col", (h, w), kernel_size, stride, pad)
    xp = cuda.get_array_module(img)
    img = xp.pad(img, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=pad_value)
    col = xp.empty((n, c, kh, kw, oh, ow), dtype=img.dtype)
    # One strided copy per kernel position (KH * KW of them), not one per output pixel.
    for i in range(kh):
        for j in range(kw):
            col[:, :, i, j] = img[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]
    if to_matrix:
        col = col.transpose(0, 4, 5, 1, 2, 3).reshape(n * oh * ow, c * kh * kw)
    return col


def col2im_array(col, img_shape, kernel_size, stride, pad, to_matrix=True):
    """The adjoint of im2col_array: add every patch back to its place in an image of
    img_shape (N, C, H, W); overlapping patches sum."""
    kernel_size, stride, pad = pair(kernel_size), pair(stride), pair(pad)
    n, c, h, w = img_shape
    (kh, kw), (sh, sw), (ph, pw) = kernel_size, stride, pad
    oh, ow = _outsize("col2im", (h, w), kernel_size, stride, pad)
    expected = (n * oh * ow, c * kh * kw) if to_matrix else (n, c, kh, kw, oh, ow)
    if col.shape != expected:
        raise ValueError(f"col2im: columns of shape {col.shape} do not fit an image of "
                         f"shape {tuple(img_shape)} with kernel {kernel_size}, stride "
                         f"{stride}, pad {pad}; expected {expected}")
    if to_matrix:
        col = col.reshape(n, oh, ow, c, kh, kw).transpose(0, 3, 4, 5, 1, 2)
    xp = cuda.get_array_module(col)
    img = xp.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=col.dtype)
    for i in range(kh):
        for j in range(kw):
            img[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw] += col[:, :, i, j]
    return img[:, :, ph:ph + h, pw:pw + w]


# =============================================================================
# im2col / col2im as Functions: im2col, col2im
# =============================================================================


class Im2col(Function):
    def __init__(self, kernel_size, stride=1, pad=0, to_matrix=True):
        self.kernel_size = _pair(self.op_name, "kernel_size", kernel_size)
        self.stride = _stride(self.op_name, stride)
        self.pad = _pair(self.op_name, "pad", pad)
        self.to_matrix = to_matrix

    def forward(self, x):
        _check_image(self.op_name, x)
        return im2col_array(x, self.kernel_size, self.stride, self.pad, self.to_matrix)

    def backward(self, gy):
        x, = self.inputs
        return col2im(gy, x.shape, self.kernel_size, self.stride, self.pad, self.to_matrix)


def im2col(x, kernel_size, stride=1, pad=0, to_matrix=True):
    """Patches of x (N, C, H, W): a (N * OH * OW, C * KH * KW) matrix, or with
    to_matrix=False an array (N, C, KH, KW, OH, OW).

    >>> im2col(np.arange(9.0).reshape(1, 1, 3, 3), 2).shape
    (4, 4)
    """
    return Im2col(kernel_size, stride, pad, to_matrix)(x)


class Col2im(Function):
    def __init__(self, input_shape, kernel_size, stride=1, pad=0, to_matrix=True):
        self.input_shape = tuple(input_shape)
        self.kernel_size = _pair(self.op_name, "kernel_size", kernel_size)
        self.stride = _stride(self.op_name, stride)
        self.pad = _pair(self.op_name, "pad", pad)
        self.to_matrix = to_matrix

    def forward(self, x):
        return col2im_array(x, self.input_shape, self.kernel_size, self.stride, self.pad,
                            self.to_matrix)

    def backward(self, gy):
        return im2col(gy, self.kernel_size, self.stride, self.pad, self.to_matrix)


def col2im(x, input_shape, kernel_size, stride=1, pad=0, to_matrix=True):
    """The adjoint of im2col: patches x summed back into an image of input_shape.

    >>> col2im(np.ones((4, 4)), (1, 1, 3, 3), 2).data[0, 0]
    array([[1., 2., 1.],
           [2., 4., 2.],
           [1., 2., 1.]])
    """
    return Col2im(input_shape, kernel_size, stride, pad, to_matrix)(x)


# =============================================================================
# Convolution: conv2d, deconv2d, Conv2DGradW, conv2d_simple
# =============================================================================


def _check_conv(op, x, W, b, w_axis, w_name):
    _check_image(op, x)
    if W.ndim != 4 or W.shape[w_axis] != x.shape[1]:
        raise ValueError(
            f"{op}: x of shape {x.shape} has {x.shape[1]} channels, so W must be 4-d "
            f"{w_name} with {x.shape[1]} at axis {w_axis}; got W of shape {W.shape}")
    out_channels = W.shape[1 - w_axis]
    if b is not None and b.shape != (out_channels,):
        raise ValueError(f"{op}: b must have shape ({out_channels},) for W of shape "
                         f"{W.shape}, got {b.shape}")


class Conv2d(Function):
    """y = cross-correlation of x (N, C, H, W) with W (OC, C, KH, KW), plus b (OC,)."""

    def __init__(self, stride=1, pad=0):
        self.stride = _stride(self.op_name, stride)
        self.pad = _pair(self.op_name, "pad", pad)

    def forward(self, x, W, b=None):
        _check_conv(self.op_name, x, W, b, 1, "(OC, C, KH, KW)")
        xp = cuda.get_array_module(x)
        n, c = x.shape[:2]
        oc, kh, kw = W.shape[0], W.shape[2], W.shape[3]
        col = im2col_array(x, (kh, kw), self.stride, self.pad, to_matrix=False)
        oh, ow = col.shape[4:]
        # (OC, C*KH*KW) @ (N, C*KH*KW, OH*OW): one batched product, no transposes.
        # Sizes spelled out, not -1, which an empty batch (N = 0) leaves undecided.
        y = xp.matmul(W.reshape(oc, c * kh * kw), col.reshape(n, c * kh * kw, oh * ow))
        y = y.reshape(n, oc, oh, ow)
        if b is not None:
            y += b.reshape(1, oc, 1, 1)
        return y

    def backward(self, gy):
        x, W = self.inputs[:2]
        gx = deconv2d(gy, W, None, self.stride, self.pad, outsize=x.shape[2:])
        gW = Conv2DGradW(W.shape[2:], self.stride, self.pad)(x, gy)
        if len(self.inputs) == 2:
            return gx, gW
        return gx, gW, sum(gy, axis=(0, 2, 3))


def conv2d(x, W, b=None, stride=1, pad=0):
    """2-d convolution (cross-correlation) of x (N, C, H, W) with W (OC, C, KH, KW),
    plus b (OC,); output (N, OC, OH, OW), OH = (H + 2 * pad - KH) // stride + 1.

    >>> conv2d(np.ones((1, 1, 3, 3)), np.ones((1, 1, 2, 2)), pad=1).data[0, 0]
    array([[1., 2., 2., 1.],
           [2., 4., 4., 2.],
           [2., 4., 4., 2.],
           [1., 2., 2., 1.]])
    """
    if b is None:
        return Conv2d(stride, pad)(x, W)
    return Conv2d(stride, pad)(x, W, b)


class Deconv2d(Function):
    """Transposed convolution: x (N, C, H, W) with W (C, OC, KH, KW), plus b (OC,)."""

    def __init__(self, stride=1, pad=0, outsize=None):
        self.stride = _stride(self.op_name, stride)
        self.pad = _pair(self.op_name, "pad", pad)
        self.outsize = None if outsize is None else pair(tuple(outsize))

    def forward(self, x, W, b=None):
        _check_conv(self.op_name, x, W, b, 0, "(C, OC, KH, KW)")
        xp = cuda.get_array_module(x)
        n, c, h, w = x.shape
        oc, kh, kw = W.shape[1], W.shape[2], W.shape[3]
        (sh, sw), (ph, pw) = self.stride, self.pad
        if self.outsize is None:
            out_h, out_w = get_deconv_outsize(h, kh, sh, ph), get_deconv_outsize(w, kw, sw, pw)
        else:
            out_h, out_w = self.outsize
        if (get_conv_outsize(out_h, kh, sh, ph), get_conv_outsize(out_w, kw, sw, pw)) != (h, w):
            raise ValueError(
                f"outsize {(out_h, out_w)} does not fit: a convolution of it with kernel "
                f"{(kh, kw)}, stride {self.stride}, pad {self.pad} gives "
                f"{(get_conv_outsize(out_h, kh, sh, ph), get_conv_outsize(out_w, kw, sw, pw))},"
                f" not x's {(h, w)}; leave outsize=None for the smallest that fits")
        # (OC*KH*KW, C) @ (N, C, H*W) -> every input pixel's contribution to a patch.
        col = xp.matmul(W.reshape(c, -1).T, x.reshape(n, c, h * w))
        col = col.reshape(n, oc, kh, kw, h, w)
        y = col2im_array(col, (n, oc, out_h, out_w), (kh, kw), self.stride, self.pad,
                         to_matrix=False)
        if b is not None:
            y += b.reshape(1, oc, 1, 1)
        return y

    def backward(self, gy):
        x, W = self.inputs[:2]
        gx = conv2d(gy, W, None, self.stride, self.pad)
        gW = Conv2DGradW(W.shape[2:], self.stride, self.pad)(gy, x)
        if len(self.inputs) == 2:
            return gx, gW
        return gx, gW, sum(gy, axis=(0, 2, 3))


def deconv2d(x, W, b=None, stride=1, pad=0, outsize=None):
    """Transposed convolution (the gradient of conv2d with respect to its input) of
    x (N, C, H, W) with W (C, OC, KH, KW), plus b (OC,); output (N, OC, OH, OW) with
    OH = stride * (H - 1) + KH - 2 * pad unless outsize gives it.

    >>> deconv2d(np.ones((1, 1, 2, 2)), np.ones((1, 1, 2, 2)), stride=2).shape
    (1, 1, 4, 4)
    """
    if b is None:
        return Deconv2d(stride, pad, outsize)(x, W)
    return Deconv2d(stride, pad, outsize)(x, W, b)


class Conv2DGradW(Function):
    """The gradient of conv2d with respect to W, from x and the output gradient gy."""
    op_name = "conv2d_grad_w"

    def __init__(self, kernel_size, stride=1, pad=0):
        self.kernel_size = pair(tuple(kernel_size))
        self.stride = pair(stride)
        self.pad = pair(pad)

    def forward(self, x, gy):
        xp = cuda.get_array_module(x)
        n, c = x.shape[:2]
        oc = gy.shape[1]
        col = im2col_array(x, self.kernel_size, self.stride, self.pad, to_matrix=False)
        (kh, kw), (oh, ow) = self.kernel_size, col.shape[4:]
        # Sizes spelled out, not -1, which an empty batch (N = 0) leaves undecided.
        col = col.reshape(n, c * kh * kw, oh * ow)
        # One (OC, P) @ (P, C*KH*KW) product per image, summed over the batch
        # (several times faster than tensordot over both axes at once).
        gW = xp.matmul(gy.reshape(n, oc, oh * ow), col.transpose(0, 2, 1)).sum(axis=0)
        return gW.reshape(oc, c, *self.kernel_size)

    def backward(self, ggW):
        x, gy = self.inputs
        gx = deconv2d(gy, ggW, None, self.stride, self.pad, outsize=x.shape[2:])
        ggy = conv2d(x, ggW, None, self.stride, self.pad)
        return gx, ggy


def conv2d_simple(x, W, b=None, stride=1, pad=0):
    """conv2d composed of im2col, linear and reshapes (the book's first version)."""
    x, W = as_variable(x), as_variable(W)
    n, _, h, w = x.shape
    oc, _, kh, kw = W.shape
    (sh, sw), (ph, pw) = _stride("conv2d_simple", stride), _pair("conv2d_simple", "pad", pad)
    oh, ow = get_conv_outsize(h, kh, sh, ph), get_conv_outsize(w, kw, sw, pw)
    col = im2col(x, (kh, kw), stride, pad, to_matrix=True)
    y = linear(col, W.reshape(oc, -1).transpose(), b)
    return y.reshape(n, oh, ow, oc).transpose(0, 3, 1, 2)


# =============================================================================
# Pooling: pooling, Pooling2DGrad, Pooling2DWithIndexes, average_pooling,
#          pooling_simple
# =============================================================================


def _window_argmax(x, kernel_size, stride, pad):
    """Index (0 .. KH*KW-1) of each pooling window's maximum, shape (N, C, OH, OW).

    Recomputed from x wherever a backward needs it, instead of being kept from
    forward. The padding is -inf, so it never wins (unlike zero padding, which
    would beat an all-negative window)."""
    col = im2col_array(x, kernel_size, stride, pad, to_matrix=False,
                       pad_value=_lowest(x.dtype))
    n, c, kh, kw, oh, ow = col.shape
    return col.reshape(n, c, kh * kw, oh, ow).argmax(axis=2)


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


class Pooling(Function):
    """Max pooling of x (N, C, H, W) over kernel-sized windows."""

    def __init__(self, kernel_size, stride=1, pad=0):
        self.kernel_size = _pair(self.op_name, "kernel_size", kernel_size)
        self.stride = _stride(self.op_name, stride)
        self.pad = _pair(self.op_name, "pad", pad)
        half = tuple(k // 2 for k in self.kernel_size)
        if any(p > h for p, h in zip(self.pad, half)):
            # Windows of padding alone would have -inf (padding never wins) as maximum.
            raise ValueError(f"pooling: pad {self.pad} is more than half the kernel "
                             f"{self.kernel_size}; border windows would hold only "
                             f"padding and give -inf. Use pad <= kernel_size // 2 = {half}")

    def forward(self, x):
        _check_image(self.op_name, x)
        col = im2col_array(x, self.kernel_size, self.stride, self.pad, to_matrix=False,
                           pad_value=_lowest(x.dtype))
        return col.max(axis=(2, 3))

    def backward(self, gy):
        x, = self.inputs
        return Pooling2DGrad(self.kernel_size, self.stride, self.pad)(x, gy)


class Pooling2DGrad(Function):
    """gx of max pooling: gy sent to each window's maximum of x; x gets no gradient."""
    op_name = "pooling_grad"

    def __init__(self, kernel_size, stride=1, pad=0):
        self.kernel_size = pair(kernel_size)
        self.stride = pair(stride)
        self.pad = pair(pad)

    def forward(self, x, gy):
        xp = cuda.get_array_module(x)
        (kh, kw) = self.kernel_size
        n, c, oh, ow = gy.shape
        index = _window_argmax(x, self.kernel_size, self.stride, self.pad)
        positions = xp.arange(kh * kw).reshape(1, 1, -1, 1, 1)
        gcol = (index[:, :, None] == positions) * gy[:, :, None]
        return col2im_array(gcol.reshape(n, c, kh, kw, oh, ow), x.shape, self.kernel_size,
                            self.stride, self.pad, to_matrix=False)

    def backward(self, ggx):
        x, gy = self.inputs
        return None, Pooling2DWithIndexes(self.kernel_size, self.stride, self.pad)(x, ggx)


class Pooling2DWithIndexes(Function):
    """z read where max pooling of x picks its maxima: pooling's linear part."""
    op_name = "pooling_with_indexes"

    def __init__(self, kernel_size, stride=1, pad=0):
        self.kernel_size = pair(kernel_size)
        self.stride = pair(stride)
        self.pad = pair(pad)

    def forward(self, x, z):
        xp = cuda.get_array_module(x)
        index = _window_argmax(x, self.kernel_size, self.stride, self.pad)
        col = im2col_array(z, self.kernel_size, self.stride, self.pad, to_matrix=False)
        n, c, kh, kw, oh, ow = col.shape
        col = col.reshape(n, c, kh * kw, oh, ow)
        return xp.take_along_axis(col, index[:, :, None], axis=2)[:, :, 0]

    def backward(self, gy):
        x, z = self.inputs
        return None, Pooling2DGrad(self.kernel_size, self.stride, self.pad)(x, gy)


def pooling(x, kernel_size, stride=1, pad=0):
    """Max pooling: the maximum of each kernel-sized window of x (N, C, H, W);
    padding never wins a window.

    >>> pooling(np.arange(16.0).reshape(1, 1, 4, 4), 2, stride=2).data[0, 0]
    array([[ 5.,  7.],
           [13., 15.]])
    """
    return Pooling(kernel_size, stride, pad)(x)


class AveragePooling(Function):
    """Mean of each kernel-sized window of x (N, C, H, W); padding counts as zeros."""

    def __init__(self, kernel_size, stride=1, pad=0):
        self.kernel_size = _pair(self.op_name, "kernel_size", kernel_size)
        self.stride = _stride(self.op_name, stride)
        self.pad = _pair(self.op_name, "pad", pad)

    def forward(self, x):
        _check_image(self.op_name, x)
        col = im2col_array(x, self.kernel_size, self.stride, self.pad, to_matrix=False)
        return col.mean(axis=(2, 3))

    def backward(self, gy):
        x, = self.inputs
        return AveragePoolingGrad(self.kernel_size, self.stride, self.pad, x.shape)(gy)


class AveragePoolingGrad(Function):
    """gx of average pooling: each gy spread evenly over its window."""

    def __init__(self, kernel_size, stride, pad, input_shape):
        self.kernel_size = pair(kernel_size)
        self.stride = pair(stride)
        self.pad = pair(pad)
        self.input_shape = tuple(input_shape)

    def forward(self, gy):
        xp = cuda.get_array_module(gy)
        (kh, kw) = self.kernel_size
        n, c, oh, ow = gy.shape
        gcol = xp.broadcast_to((gy * (1 / (kh * kw)))[:, :, None, None], (n, c, kh, kw, oh, ow))
        return col2im_array(gcol, self.input_shape, self.kernel_size, self.stride, self.pad,
                            to_matrix=False)

    def backward(self, ggx):
        return average_pooling(ggx, self.kernel_size, self.stride, self.pad)


def average_pooling(x, kernel_size, stride=1, pad=0):
    """Mean of each kernel-sized window of x (N, C, H, W); padded zeros count.

    >>> average_pooling(np.arange(16.0).reshape(1, 1, 4, 4), 2, stride=2).data[0, 0]
    array([[ 2.5,  4.5],
           [10.5, 12.5]])
    """
    return AveragePooling(kernel_size, stride, pad)(x)


class FirstMaxMask(Function):
    """1 at the first maximum of each row of x (N, K), 0 elsewhere (in x's dtype);
    not differentiable."""

    def forward(self, x):
        xp = cuda.get_array_module(x)
        return (x.argmax(axis=1)[:, None] == xp.arange(x.shape[1])).astype(x.dtype)

    def backward(self, gy):
        return None


def pooling_simple(x, kernel_size, stride=1, pad=0):
    """Max pooling composed of im2col, reshape and a pick of each window's maximum
    (the book's first version); unlike pooling, its padding is zeros."""
    x = as_variable(x)
    n, c, h, w = x.shape
    (kh, kw), (ph, pw) = (_pair("pooling_simple", "kernel_size", kernel_size),
                          _pair("pooling_simple", "pad", pad))
    sh, sw = _stride("pooling_simple", stride)
    oh, ow = get_conv_outsize(h, kh, sh, ph), get_conv_outsize(w, kw, sw, pw)
    col = im2col(x, kernel_size, stride, pad, to_matrix=True).reshape(-1, kh * kw)
    # Not max(col, axis=1), which shares a tied maximum's gradient: as in pooling,
    # the first maximum of a window takes all of it.
    y = sum(col * FirstMaxMask()(col), axis=1)
    return y.reshape(n, oh, ow, c).transpose(0, 3, 1, 2)
