"""The training step of the book's examples, for tests that train a model: forward,
loss, cleared gradients, backward and the optimizer's update, eager or traced."""
import dezero
import dezero.functions as F


def training_step(model, optimizer, traced=False):
    """step(x, t) -> loss of model on (x, t), after one update by optimizer."""
    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return dezero.trace(step) if traced else step
