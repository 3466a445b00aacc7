"""The training step of the book's examples, for tests that train a model: forward,
loss, cleared gradients, backward and the optimizer's update, eager or traced; twin
models, one on each device; and a linear regression whose update is written out."""
import numpy as np

import dezero
import dezero.functions as F
from dezero import Variable
from dezero.utils import clip_grad_norm


def twin_models(make, x):
    """[on the CPU, on the GPU]: two models that make() gives alike from one seed,
    their lazily sized weights made on x[:1], the second moved to the GPU."""
    models = []
    for _ in range(2):
        np.random.seed(0)
        model = make()
        model(x[:1])
        models.append(model)
    models[1].to_gpu()
    return models


def trained_on_both_devices(make, optimizer, x, t, loss_rtol):
    """Twin models of make() trained side by side on five batches of 30, eager on the
    CPU and traced on the GPU; asserts each batch's loss and the final parameters
    agree. Returns the traced GPU step."""
    from dezero.cuda import as_cupy, as_numpy
    cpu, gpu = twin_models(make, x)
    cpu_step = training_step(cpu, optimizer().setup(cpu))
    gpu_step = training_step(gpu, optimizer().setup(gpu), traced=True)
    for i in range(5):
        batch = slice(30 * i, 30 * i + 30)
        loss_cpu = cpu_step(x[batch], t[batch])
        loss_gpu = gpu_step(as_cupy(x[batch]), as_cupy(t[batch]))
        np.testing.assert_allclose(as_numpy(loss_gpu.data), loss_cpu.data, rtol=loss_rtol)
    for p_cpu, p_gpu in zip(cpu.params(), gpu.params()):
        np.testing.assert_allclose(as_numpy(p_gpu.data), p_cpu.data, rtol=1e-4, atol=1e-6)
    return gpu_step


def training_step(model, optimizer, traced=False, max_norm=None):
    """step(x, t) -> loss of model on (x, t), after one update by optimizer (of the
    gradients clipped to a global norm of max_norm, where given)."""
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        if max_norm is not None:
            clip_grad_norm(model, max_norm)
        optimizer.update()
        return loss
    return dezero.trace(step) if traced else step


def entropy_bonus_step(model, optimizer, traced=False):
    """step(x, t) -> (loss, logits) of a classifier trained on cross entropy with an
    entropy bonus: softmax and log_softmax of the same logits, a kernel of several
    passes once traced."""
    def step(x, t):
        z = model(x)
        loss = F.softmax_cross_entropy(z, t) - 0.1 * F.sum(F.softmax(z) * F.log_softmax(z))
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss, z
    return dezero.trace(step) if traced else step


def linear_regression_step():
    """(traced step, x, t): a linear regression on three features trained by plain
    SGD written out as the book does, .data updates under no_grad."""
    W = Variable(np.zeros((3, 1), np.float32), name="W")
    b = Variable(np.zeros(1, np.float32), name="b")
    lr = Variable(np.array(0.1, np.float32), name="lr")

    @dezero.trace
    def step(x, t):
        loss = F.mean_squared_error(F.linear(x, W, b), t)
        W.cleargrad()
        b.cleargrad()
        loss.backward()
        with dezero.no_grad():
            W.data = (W - lr * W.grad).data
            b.data = (b - lr * b.grad).data
        return loss

    x = np.random.default_rng(0).standard_normal((8, 3)).astype(np.float32)
    return step, x, x @ np.array([[1.0], [2.0], [3.0]], np.float32) + 0.5
