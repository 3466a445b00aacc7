"""Step 60: LSTM, and mini-batches of time series with SeqDataLoader.

Two improvements on step 59. An LSTM layer adds a memory cell guarded by
input, forget and output gates, which keeps gradients alive over longer
spans than the plain RNN's repeated tanh. And `SeqDataLoader` makes
mini-batches of sequences: it cuts the series into batch_size parallel
streams and at each call returns the next element of every stream, so the
order in time is kept within each row of the batch.
Run: python steps/step60.py
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from pictures import pyplot

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero import Model, SeqDataLoader, optimizers

max_epoch = 40
batch_size = 30
hidden_size = 100
bptt_length = 30


class BetterRNN(Model):
    def __init__(self, hidden_size, out_size):
        super().__init__()
        self.rnn = L.LSTM(hidden_size)
        self.fc = L.Linear(out_size)

    def reset_state(self):
        self.rnn.reset_state()

    def forward(self, x):
        h = self.rnn(x)
        return self.fc(h)


np.random.seed(0)
train_set = dezero.datasets.SinCurve(train=True)
dataloader = SeqDataLoader(train_set, batch_size=batch_size)
seqlen = len(train_set)
x, t = next(iter(SeqDataLoader(train_set, batch_size=batch_size)))
print(f"one batch: x {x.shape}, t {t.shape} (one step of {batch_size} streams)")

model = BetterRNN(hidden_size, 1)
optimizer = optimizers.Adam().setup(model)

for epoch in range(max_epoch):
    model.reset_state()
    loss, count = 0, 0
    for x, t in dataloader:
        y = model(x)
        loss += F.mean_squared_error(y, t)
        count += 1
        if count % bptt_length == 0 or count == seqlen:
            model.cleargrads()
            loss.backward()
            loss.unchain_backward()
            optimizer.update()
    if (epoch + 1) % 10 == 0:
        print(f"epoch {epoch + 1}: loss {float(loss.data) / count:.6f}")

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
    plt.savefig("lstm_cos_prediction.png")
    print("plot saved to lstm_cos_prediction.png")
