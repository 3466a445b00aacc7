"""Step 71: data parallelism -- several processes train one model, gradients averaged.

Each process (a rank) holds the whole model and trains on its own shard of the
data; before each update the gradients are averaged over the ranks, so every rank
takes the same step, the one a single process would take on the whole batch.
`dezero.distributed` does this over MPI (mpi4py): `dist.init()` joins the ranks,
`comm.broadcast_params(model)` gives every rank rank 0's initial weights,
`dist.AllreduceGrads(comm)` averages the gradients in one exchange, and
`dist.shard(dataset, comm, seed=epoch)` hands each rank its part of each epoch.
In the traced step the exchange is one node of the graph, an `allreduce` that no
pass moves, merges or fuses. Here the spiral data, with the book's batch of 30
split over the ranks.
Run: mpiexec -n 2 python -m mpi4py steps/step71.py   (python steps/step71.py: one rank)
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import dezero
import dezero.distributed as dist
import dezero.functions as F
from dezero import optimizers
from dezero.dataloaders import DataLoader
from dezero.datasets import Spiral, get_spiral
from dezero.models import MLP
from dezero.utils import GraphvizNotFoundError

comm = dist.init()
comm.print(f"a world of {comm.size} rank(s)" + ("" if comm.size > 1 else
           ": run it with mpiexec -n 2 python -m mpi4py steps/step71.py for two"))

np.random.seed(comm.rank)         # every rank draws different initial weights ...
model = MLP((10, 3))
model(np.zeros((1, 2), np.float32))
comm.broadcast_params(model)      # ... and takes rank 0's
optimizer = optimizers.SGD(lr=1.0).setup(model)
optimizer.add_hook(dist.AllreduceGrads(comm))


@dezero.trace
def train_step(x, t):
    loss = F.softmax_cross_entropy(model(x), t)
    model.cleargrads()
    loss.backward()
    optimizer.update()            # AllreduceGrads first, then the update
    return loss


train_set = Spiral(train=True)
batch = 30 // comm.size           # per rank: 30 examples per step in all
for epoch in range(300):
    part = dist.shard(train_set, comm, shuffle=True, seed=epoch)
    total = 0.0
    for x, t in DataLoader(part, batch_size=batch, shuffle=False):
        total += float(train_step(x, t).data) * len(t)
    if (epoch + 1) % 100 == 0:    # the mean loss over all ranks' examples
        mean = comm.allreduce(np.array(total)) / (len(part) * comm.size)
        comm.print(f"epoch {epoch + 1}: loss {mean:.4f}")

x, t = get_spiral(train=True)
accuracy = float(F.accuracy(model(x), t).data)
W = model.l0.W.data
spread = comm.allreduce(np.abs(W - comm.broadcast(W)), op="max").max()
comm.print(f"accuracy on the whole set: {accuracy:.3f}; "
           f"ranks hold equal parameters: {spread == 0}")

comm.print("the traced step, with its exchange as one node:")
comm.print(train_step.graph)
if comm.rank == 0:
    try:
        train_step.graph.plot("step71.png")   # the allreduce is the purple hexagon
        print("graph saved to step71.png")
    except GraphvizNotFoundError as e:
        print(f"skipped drawing step71.png: {e}")
