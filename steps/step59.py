"""Step 59: a recurrent network on a sine curve, with truncated BPTT.

An RNN layer carries a hidden state from one call to the next:
h_t = tanh(W_x x_t + W_h h_{t-1} + b), so its output depends on everything
seen so far. Fed a sine wave one value at a time, the network learns to
predict the next value. Backpropagation through time over the whole sequence
would keep a graph as long as the data, so the loss is backpropagated every
`bptt_length` steps and `loss.unchain_backward()` cuts the graph there (the
hidden state's value carries on). Few epochs here, to stay quick; the
trained net then predicts a cosine it never saw.
Run: python steps/step59.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import Model, optimizers

max_epoch = 5
hidden_size = 100
bptt_length = 30


class SimpleRNN(Model):
    def __init__(self, hidden_size, out_size):
        super().__init__()
        self.rnn = L.RNN(hidden_size)
        self.fc = L.Linear(out_size)

    def reset_state(self):
        self.rnn.reset_state()

    def forward(self, x):
        h = self.rnn(x)
        return self.fc(h)


np.random.seed(0)  # the noise of SinCurve and the initial weights
train_set = dezero.datasets.SinCurve(train=True)
seqlen = len(train_set)
model = SimpleRNN(hidden_size, 1)
optimizer = optimizers.Adam().setup(model)

for epoch in range(max_epoch):
    model.reset_state()
    loss, count = 0, 0
    for x, t in train_set:
        # One example at a time, as a batch of one: the input becomes (1, 1); the
        # target stays (1,), which mean_squared_error pairs with y's (1, 1).
        x = x.reshape(1, 1)
        y = model(x)
        loss += F.mean_squared_error(y, t)
        count += 1
        if count % bptt_length == 0 or count == seqlen:
            model.cleargrads()
            loss.backward()
            loss.unchain_backward()  # later backward passes stop here
            optimizer.update()
    print(f"epoch {epoch + 1}: loss {float(loss.data) / count:.6f}")

# Predict cos one step ahead, feeding the true values.
xs = np.cos(np.linspace(0, 4 * np.pi, 1000))
model.reset_state()
predictions = []
with dezero.no_grad():
    for x in xs:
        y = model(np.array(x).reshape(1, 1))
        predictions.append(float(y.data.item()))
error = np.mean((np.array(predictions[:-1]) - xs[1:]) ** 2)
print(f"one-step prediction of cos: mean squared error {error:.6f}")

plt = pyplot()
if plt is not None:
    plt.plot(np.arange(len(xs)), xs, label="y=cos(x)")
    plt.plot(np.arange(len(xs)), predictions, label="predict")
    plt.xlabel("x")
    plt.ylabel("y")
    plt.legend()
    plt.savefig("rnn_cos_prediction.png")
    print("plot saved to rnn_cos_prediction.png")
