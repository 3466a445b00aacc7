"""Every function of the op table against PyTorch (float64 and float32, same inputs):
values, gradients, and the gradient of a gradient. Skipped when torch is not installed;
left out of the quick loop (the `torch` fixture marks it slow)."""
import numpy as np
import pytest
from op_table import ROWS

import dezero.functions as F
from dezero import Variable

ROWS_WITH_TORCH = [row for row in ROWS if row.torch is not None]


def _weights(shape):
    # A non-uniform upstream gradient catches transposed or misplaced gradients.
    return np.random.default_rng(7).uniform(0.5, 1.5, size=shape)


# (values, derivatives) -> (rtol, atol). Inputs and results are of order 1: float64 agrees
# to a few ulp, a derivative (more operations) to a few hundred; float32 (ulp 6e-8 at 1)
# to some ten ulp and a hundred.
TOLERANCES = {np.float64: ((1e-12, 1e-14), (1e-10, 1e-12)),
              np.float32: ((1e-5, 1e-6), (1e-4, 1e-5))}


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("row", ROWS_WITH_TORCH, ids=[row.name for row in ROWS_WITH_TORCH])
def test_values_and_gradients_match_torch(row, dtype, torch):
    (rtol, atol), (grad_rtol, grad_atol) = TOLERANCES[dtype]
    arrays = row.inputs(dtype)
    xs = [Variable(a) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]

    y = row.fn(*xs)
    ty = row.torch(*ts)
    assert y.dtype == dtype and ty.dtype == ts[0].dtype
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=rtol, atol=atol)

    w = _weights(y.shape).astype(dtype)
    F.sum(y * w).backward(create_graph=True)
    tgrads = torch.autograd.grad((ty * torch.tensor(w)).sum(), ts, create_graph=True)
    for i, (x, tg) in enumerate(zip(xs, tgrads)):
        np.testing.assert_allclose(x.grad.data, tg.detach().numpy(), rtol=grad_rtol,
                                   atol=grad_atol, err_msg=f"{row.name}: gradient of input {i}")

    if not row.second or not tgrads[0].requires_grad:
        return  # the gradient does not depend on the inputs (linear ops)
    gx0 = xs[0].grad
    for x in xs:
        x.cleargrad()
    F.sum(gx0).backward()
    tggs = torch.autograd.grad(tgrads[0].sum(), ts, allow_unused=True)
    for i, (x, tgg) in enumerate(zip(xs, tggs)):
        mine = np.zeros_like(arrays[i]) if x.grad is None else x.grad.data
        theirs = np.zeros_like(arrays[i]) if tgg is None else tgg.numpy(force=True)
        np.testing.assert_allclose(mine, theirs, rtol=grad_rtol, atol=grad_atol,
                                   err_msg=f"{row.name}: second derivative, input {i}")
