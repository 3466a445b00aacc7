"""dezero.distributed in one process: a world of size 1, sharding arithmetic, the
gradient hook, and the allreduce node of traced steps (the passes keep it as
recorded). The runs of several ranks under mpiexec are in test_distributed_mpi.py."""
import sys

import numpy as np
import pytest
from train_helpers import training_step

import dezero
import dezero.distributed as dist
import dezero.functions as F
from dezero import Variable, optimizers
from dezero.dataloaders import DataLoader
from dezero.datasets import Spiral
from dezero.errors import GraphFileError, TraceError
from dezero.models import MLP

pytest.importorskip("mpi4py")


@pytest.fixture
def comm():
    return dist.init()


@pytest.fixture
def half_world(comm, monkeypatch):
    """The world as if it had a second rank whose arrays are all zeros: a sum leaves
    this rank's values, a mean halves them."""
    monkeypatch.setattr(comm, "size", 2)
    monkeypatch.setattr(comm, "_mpi_exchange", lambda flat, what, op, root, out=None: None)
    return comm


def classification(n=16, dim=3, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, dim)).astype(np.float32),
            rng.integers(0, classes, n))


# =============================================================================
# A world of one process
# =============================================================================


def test_a_plain_process_is_a_world_of_one_and_init_returns_it_again(comm):
    assert (comm.rank, comm.size, comm.local_rank) == (0, 1, 0)
    assert dist.init() is comm
    comm.barrier()


def test_without_mpi4py_init_says_what_to_install(monkeypatch):
    monkeypatch.setattr(dist, "_COMMUNICATORS", {})
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # an import of it fails
    with pytest.raises(ImportError, match=r"pip install 'dezero\[distributed\]'"):
        dist.init()


def test_collectives_of_one_rank_return_new_arrays_of_the_same_values(comm):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for op in ("sum", "mean", "max", "min"):
        y = comm.allreduce(x, op=op)
        assert y.shape == x.shape and y.dtype == x.dtype and not np.shares_memory(x, y)
        np.testing.assert_array_equal(y, x)
    y = comm.broadcast(x)
    np.testing.assert_array_equal(y, x)
    assert not np.shares_memory(x, y)


def test_allreduce_refuses_what_it_cannot_do(comm):
    with pytest.raises(ValueError, match="op must be one of"):
        comm.allreduce(np.ones(3), op="prod")
    with pytest.raises(TypeError, match="op='mean' of int64 arrays would round"):
        comm.allreduce(np.arange(3, dtype=np.int64), op="mean")
    with pytest.raises(TypeError, match=r"op='max' of complex128 arrays has no order"):
        comm.allreduce(np.array([1j]), op="max")
    with pytest.raises(TypeError, match="arrays of numbers only"):
        comm.allreduce(np.array(["a"]))


def test_allreduce_of_booleans_says_what_to_cast_them_to(comm):
    # MPI has no sum of booleans: its own error named neither the array nor the fix.
    with pytest.raises(TypeError, match=r"a bool array \(shape \(2,\)\).*astype\(np.int32\)"):
        comm.allreduce(np.array([True, False]))
    np.testing.assert_array_equal(comm.broadcast(np.array([True, False])), [True, False])


def test_broadcast_of_a_parameter_says_to_pass_its_array(comm):
    # np.asarray made an object array of it: "arrays of numbers only, not object".
    p = dezero.Parameter(np.ones((2, 3), np.float32), name="W")
    with pytest.raises(TypeError, match=r"broadcast: a Variable \(W: float32\[2, 3\]\).*"
                                        r"p.data = comm.broadcast\(p.data\).*broadcast_params"):
        comm.broadcast(p)


def test_mean_and_sum_with_a_second_rank_of_zeros(half_world):
    x = np.array([1.0, 3.0], dtype=np.float32)
    np.testing.assert_array_equal(half_world.allreduce(x, op="mean"), x / 2)
    np.testing.assert_array_equal(half_world.allreduce(x), x)


def test_allreduce_of_a_variable_is_an_op_with_a_backward(half_world):
    x = Variable(np.array([2.0, 4.0]))
    y = half_world.allreduce(x, op="mean")
    assert isinstance(y, Variable) and y.creator.op_name == "allreduce"
    np.testing.assert_array_equal(y.data, [1.0, 2.0])
    F.sum(y * y).backward()
    # d/dx of sum(mean(x)^2) on this rank, with the other rank's gradient zero:
    # mean over ranks of 2 * y
    np.testing.assert_array_equal(x.grad.data, [1.0, 2.0])


def test_broadcast_params_wants_an_initialised_model(comm):
    model = MLP((4, 2))
    with pytest.raises(ValueError, match=r"not initialised yet.*model\(x\[:1\]\)"):
        comm.broadcast_params(model)
    x, _ = classification()
    model(x[:1])
    before = [p.data.copy() for p in model.params()]
    comm.broadcast_params(model)
    for p, b in zip(model.params(), before):
        np.testing.assert_array_equal(p.data, b)


def test_rank_zero_prints_and_saves(comm, tmp_path, capsys):
    comm.print("epoch", 1)
    assert capsys.readouterr().out == "epoch 1\n"
    comm.print("loss", 0.5, end="", flush=True)  # print's own keywords, flush too
    assert capsys.readouterr().out == "loss 0.5"
    model = MLP((2,))
    model(np.ones((1, 3), np.float32))
    comm.save_weights(model, str(tmp_path / "w.npz"))
    assert (tmp_path / "w.npz").exists()


# =============================================================================
# Shards: equal lengths, disjoint, the same on every rank's reckoning
# =============================================================================


@pytest.mark.parametrize("n", [1, 7, 8, 300])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_shards_have_equal_lengths_and_cover_every_example(n, size):
    if n < size:
        with pytest.raises(ValueError, match="leave rank"):
            dist.shard_indices(n, 0, size, drop_last=True)
    per_rank = -(-n // size)
    shards = [dist.shard_indices(n, r, size, seed=5) for r in range(size)]
    assert all(len(s) == per_rank for s in shards)
    joined = np.concatenate(shards)
    assert set(joined.tolist()) == set(range(n))
    # Only the padding repeats examples: the first n indices are all different.
    assert len(set(joined[:n].tolist())) == n
    if n >= size:
        dropped = [dist.shard_indices(n, r, size, seed=5, drop_last=True) for r in range(size)]
        joined = np.concatenate(dropped)
        assert all(len(s) == n // size for s in dropped) and len(set(joined.tolist())) == \
            len(joined) == n // size * size


def test_the_seed_picks_the_split_and_shuffle_false_keeps_the_order():
    a = dist.shard_indices(300, 1, 4, seed=0)
    assert np.array_equal(a, dist.shard_indices(300, 1, 4, seed=0))
    assert not np.array_equal(a, dist.shard_indices(300, 1, 4, seed=1))
    np.testing.assert_array_equal(dist.shard_indices(10, 1, 3, shuffle=False), [4, 5, 6, 7])
    np.testing.assert_array_equal(dist.shard_indices(10, 2, 3, shuffle=False), [8, 9, 0, 1])


def test_shuffling_without_a_seed_is_refused():
    # seed=None drew a different order on each rank: shards overlapped and left
    # examples out, silently.
    with pytest.raises(ValueError, match=r"seed=None.*the same int on every rank"):
        dist.shard_indices(8, 0, 2, seed=None)
    np.testing.assert_array_equal(dist.shard_indices(4, 1, 2, shuffle=False, seed=None),
                                  [2, 3])


def test_a_dataloader_over_any_rank_s_shard_gives_the_same_number_of_batches():
    dataset = Spiral()  # 300 examples
    for size in (2, 4, 7):
        counts = set()
        for rank in range(size):
            part = dist.Shard(dataset, dist.shard_indices(len(dataset), rank, size, seed=3))
            loader = DataLoader(part, batch_size=16)
            counts.add(sum(1 for _ in loader))
            x, t = part[0]
            assert x.shape == (2,) and np.asarray(t).shape == ()
        assert counts == {-(-(-(-300 // size)) // 16)}


def test_shard_of_a_world_of_one_is_the_whole_dataset(comm):
    dataset = Spiral()
    part = dist.shard(dataset, comm, shuffle=True, seed=0)
    assert len(part) == len(dataset)
    assert sorted(int(i) for i in part.indices) == list(range(len(dataset)))


# =============================================================================
# AllreduceGrads: first of the hooks, every parameter, one op
# =============================================================================


def test_the_hook_s_class_is_refused(comm):
    # add_hook(dist.AllreduceGrads): update() called the class on the parameters, made a
    # hook and ran nothing, so every rank trained on its own shard, silently.
    with pytest.raises(TypeError, match=r"AllreduceGrads is a class.*"
                                        r"optimizer.add_hook\(AllreduceGrads\(...\)\)"):
        optimizers.SGD().add_hook(dist.AllreduceGrads)
    with pytest.raises(TypeError, match=r"WeightDecay is a class"):
        dist.ShardedOptimizer(optimizers.SGD(), comm).add_hook(optimizers.WeightDecay)


def test_sharded_optimizer_setup_refuses_a_list_of_parameters(comm):
    with pytest.raises(TypeError, match=r"^ShardedOptimizer.setup: the target must be a Layer "
                                        r"or a Model .*, got a list of length 1"):
        dist.ShardedOptimizer(optimizers.SGD(), comm).setup([dezero.Parameter(np.ones(2))])


def test_allreduce_grads_runs_before_the_other_hooks(half_world):
    x, t = classification()
    model = MLP((4, 3))
    model(x[:1])
    optimizer = optimizers.SGD(lr=0.0).setup(model)
    optimizer.add_hook(optimizers.WeightDecay(0.5))   # added first ...
    optimizer.add_hook(dist.AllreduceGrads(half_world))  # ... runs second
    loss = F.softmax_cross_entropy(model(x), t)
    loss.backward()
    grads = {id(p): p.grad.data.copy() for p in model.params()}
    optimizer.update()
    for p in model.params():  # the mean with the other rank's zeros, then the decay
        np.testing.assert_allclose(p.grad.data, grads[id(p)] / 2 + 0.5 * p.data, rtol=1e-6)


def test_a_parameter_without_a_gradient_exchanges_zeros(half_world, monkeypatch):
    x, t = classification()
    model = MLP((4, 3))
    model(x[:1])
    used, unused = model.l0.W, model.l1.W
    optimizer = optimizers.SGD(lr=0.0).setup(model)
    optimizer.add_hook(dist.AllreduceGrads(half_world))
    exchanged = []
    real = half_world._reduce_arrays
    monkeypatch.setattr(half_world, "_reduce_arrays", lambda arrays, op: exchanged.append(
        len(arrays)) or real(arrays, op))
    # The other rank has a gradient for every parameter (its values are zeros).
    monkeypatch.setattr(half_world, "_any_rank", lambda flags: [True] * len(flags))
    used.grad = Variable(np.ones_like(used.data))
    optimizer.update()
    assert exchanged == [len(list(model.params()))]  # all of them, in one exchange
    np.testing.assert_array_equal(used.grad.data, 0.5)
    np.testing.assert_array_equal(unused.grad.data, 0.0)


def test_one_exchange_per_dtype_and_each_gradient_keeps_its_dtype(half_world, monkeypatch):
    comm, exchanged = half_world, []
    real = comm._exchange
    monkeypatch.setattr(comm, "_exchange", lambda flat, *args: exchanged.append(
        (flat.dtype, flat.size)) or real(flat, *args))
    grads = [np.ones((2, 3), np.float32), np.ones(4, np.float64), np.ones(5, np.float32)]
    means = dist.Allreduce("world", "mean")(*[Variable(g) for g in grads])
    assert sorted(exchanged, key=str) == [(np.float32, 11), (np.float64, 4)]
    assert [m.data.dtype for m in means] == [np.float32, np.float64, np.float32]
    assert [m.shape for m in means] == [(2, 3), (4,), (5,)]


def test_alone_the_allreduce_op_returns_its_inputs_and_refuses_what_it_would_refuse(comm):
    # A world of one: each gradient is its own mean, so the hook's exchange (a node of
    # a traced step all the same) costs no copy, as a reshape returns its input.
    grads = [np.ones((2, 3), np.float32), np.arange(4.0)]
    means = dist.Allreduce("world", "mean")(*[Variable(g) for g in grads])
    assert [m.data is g for m, g in zip(means, grads)] == [True, True]
    with pytest.raises(TypeError, match="would round"):
        dist.Allreduce("world", "mean")(Variable(np.arange(3)))
    with pytest.raises(TypeError, match="astype"):
        dist.Allreduce("world", "sum")(Variable(np.ones(3, bool)))


def test_training_in_a_world_of_one_is_training_alone(comm):
    x, t = classification()
    runs = []
    for hook in (False, True):
        np.random.seed(0)
        model = MLP((8, 3))
        optimizer = optimizers.Adam().setup(model)
        if hook:
            optimizer.add_hook(dist.AllreduceGrads(comm))
        step = training_step(model, optimizer)
        losses = [float(step(x, t).data) for _ in range(4)]
        runs.append((losses, [p.data.copy() for p in model.params()]))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1]):
        np.testing.assert_array_equal(a, b)


# =============================================================================
# The traced step: one allreduce node that no pass moves, merges, folds or fuses
# =============================================================================


def test_a_traced_step_has_one_allreduce_node_between_backward_and_the_update(comm):
    x, t = classification()
    steps = []
    for _ in range(2):
        np.random.seed(0)
        model = MLP((8, 3))
        model(x[:1])
        optimizer = optimizers.Adam().setup(model)
        optimizer.add_hook(dist.AllreduceGrads(comm))
        steps.append((training_step(model, optimizer), model))
    (eager, model_e), (traced, model) = steps
    traced = dezero.trace(traced)
    for _ in range(3):  # (fused kernels, DEZERO_BACKEND=cpu, round a few ulp apart)
        np.testing.assert_allclose(traced(x, t).data, eager(x, t).data, rtol=1e-6)
    for a, b in zip(model.params(), model_e.params()):
        np.testing.assert_allclose(a.data, b.data, rtol=1e-6)

    graph = traced.graph
    ops = [n for n in graph.nodes if n.kind == "op"]
    allreduce, = [n for n in ops if n.op == "allreduce"]
    assert allreduce.record.collective
    assert allreduce.attrs == {"comm": "world", "op": "mean"}
    assert len(allreduce.inputs) == len(allreduce.outputs) == 4  # every gradient at once
    lines = [line for line in str(graph).splitlines() if "allreduce(" in line]
    assert len(lines) == 1 and lines[0].strip().startswith("bg: f32[3,8], bh: f32[8]")
    # matmuls of backward before it, the optimizer's updates after it
    at = ops.index(allreduce)
    assert any(n.op == "matmul" for n in ops[:at])
    grads = {id(v) for v in allreduce.outputs}
    readers = [n for n in ops if any(id(v) in grads for v in n.inputs)]
    assert readers and all(ops.index(n) > at for n in readers)
    assert 'shape=hexagon' in [line for line in graph.to_dot().splitlines()
                               if '"op' in line and "allreduce" in line][0]
    assert "_allreduce0(" in graph.code


def test_no_pass_folds_merges_removes_or_fuses_across_a_collective(comm):
    def f(x, w):
        y = x * 2.0                       # elementwise, before the exchange
        a = comm.allreduce(w)
        b = comm.allreduce(w)             # the same exchange twice: two exchanges
        comm.allreduce(w * 0.0)           # an unused result: the others still wait
        c = comm.allreduce(Variable(np.ones(3, np.float32)))  # of a constant
        return y + 1.0 + a + b + c        # elementwise, after it: y's chain may not join

    x, w = np.ones(3, np.float32), np.full(3, 2.0, np.float32)
    graph = dezero.trace(f).lower(x, w)
    ops = [n.op for n in graph.nodes if n.kind == "op"]
    # All four kept, in the recorded order, nothing moved across them:
    assert ops == ["mul", "allreduce", "allreduce", "mul", "allreduce", "allreduce"] + \
        ["add"] * 4
    group, = graph.groups  # the adds after the exchanges; the mul before stays apart
    assert [n.op for n in group.nodes] == ["add"] * 4
    np.testing.assert_array_equal(dezero.trace(f)(x, w).data, f(x, w).data)


def test_a_saved_graph_with_an_allreduce_runs_after_loading(comm, tmp_path):
    x = np.arange(4, dtype=np.float32)
    traced = dezero.trace(lambda x: comm.allreduce(x * 3.0, op="mean") + 1.0)
    expected = traced(x).data
    traced.graph.save(str(tmp_path / "g.json"))
    loaded = dezero.static.StaticGraph.load(str(tmp_path / "g.json"))
    assert "allreduce(" in str(loaded)
    np.testing.assert_array_equal(loaded(x).data, expected)


def test_arrays_inside_a_traced_function_are_exchanged_by_the_recorded_op(comm):
    def f(x):
        return comm.allreduce(x * 2.0)

    traced = dezero.trace(f)
    np.testing.assert_array_equal(traced(np.ones(2, np.float32)).data, [2.0, 2.0])
    assert [n.op for n in traced.graph.nodes if n.kind == "op"] == ["mul", "allreduce"]
    with pytest.raises(TypeError, match="broadcast before the traced call"):
        dezero.trace(lambda x: comm.broadcast(x))(np.ones(2, np.float32))


def test_a_numpy_array_exchanged_inside_a_traced_function_is_recorded(comm):
    # It was exchanged once, while recording, and the replays returned that result
    # without an exchange, whatever the array held by then.
    counts = np.zeros(2, np.float32)
    traced = dezero.trace(lambda x: x + comm.allreduce(counts))
    for i in range(3):
        counts[...] = i
        np.testing.assert_array_equal(traced(np.zeros(2, np.float32)).data, [i, i])
    assert [n.op for n in traced.graph.nodes if n.kind == "op"] == ["allreduce", "add"]


def test_a_barrier_or_broadcast_inside_a_traced_function_is_refused(comm):
    # A replay runs no Python: they would wait or exchange only while recording.
    weights = np.ones(2, np.float32)
    for call in (comm.barrier, lambda: comm.broadcast(weights)):
        traced = dezero.trace(lambda x: (call(), x * 2.0)[1])
        with pytest.raises(TraceError, match=r"inside a traced function "
                                             r"\(test_distributed.py:\d+.*only while recording"):
            traced(np.zeros(2, np.float32))


def test_a_parameter_without_a_gradient_on_every_rank_is_left_alone(comm):
    # One process skips a parameter the loss does not reach; so must the ranks: zeros
    # averaged in would let weight decay and Adam's moments move it.
    x, t = classification()
    runs = []
    for hook in (False, True):
        np.random.seed(0)
        model = MLP((8, 3))
        model(x[:1])
        spare = dezero.Parameter(np.ones(3, np.float32), name="spare")
        model.spare = spare
        optimizer = optimizers.Adam().setup(model)
        optimizer.add_hook(optimizers.WeightDecay(0.1))
        if hook:
            optimizer.add_hook(dist.AllreduceGrads(comm))
        step = training_step(model, optimizer)
        for _ in range(3):
            step(x, t)
        assert spare.grad is None
        runs.append([p.data.copy() for p in model.params()])
    np.testing.assert_array_equal(model.spare.data, 1.0)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


# =============================================================================
# ShardedOptimizer: each rank updates its block; the same parameters as the hook
# =============================================================================


@pytest.mark.parametrize("sizes", [[5], [3, 8, 1], [24, 8, 24, 3], [1, 1], [7, 0, 2]])
@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_the_blocks_of_all_ranks_cover_every_parameter_once(sizes, size):
    total = sum(sizes)
    block = -(-total // size)
    covered = [np.zeros(n, int) for n in sizes]
    for rank in range(size):
        pieces = dist.block_pieces(sizes, rank, size)
        assert sum(stop - start for _, start, stop in pieces) == \
            max(0, min(total, (rank + 1) * block) - rank * block)
        for i, start, stop in pieces:
            assert 0 <= start < stop <= sizes[i]
            covered[i][start:stop] += 1
    assert all((c == 1).all() for c in covered)
    # rank 1 of 2 over [3, 8, 1]: elements 6..11, the end of the second and the third
    assert dist.block_pieces([3, 8, 1], 1, 2) == [(1, 3, 8), (2, 0, 1)]


@pytest.fixture
def rank0_of_2(comm, monkeypatch):
    """The world as rank 0 of 2, whose partner's arrays hold 7s: a sum adds 7 to
    each element of rank 0's block, an allgather fills the partner's block with 7s."""
    monkeypatch.setattr(comm, "size", 2)

    def exchange(flat, what, op, root, out=None):
        if what == "reduce_scatter":
            out[...] = flat[:out.size] + 7
        else:
            flat[flat.size // 2:] = 7

    monkeypatch.setattr(comm, "_mpi_exchange", exchange)
    return comm


def test_reduce_scatter_and_allgather_exchange_their_blocks(rank0_of_2):
    a, b = np.arange(6.0).reshape(2, 3), np.array([10.0, 20.0, 30.0])
    block = dist.ReduceScatter("world", "sum")(Variable(a), Variable(b))
    assert block.creator.op_name == "reduce_scatter"
    np.testing.assert_array_equal(block.data, np.arange(5.0) + 7)  # elements 0..4 of 9
    half = dist.ReduceScatter("world", "mean")(Variable(a), Variable(b))
    np.testing.assert_array_equal(half.data, np.arange(5.0) / 2 + 7)
    x, y = dist.Allgather("world", [(2, 3), (3,)])(Variable(np.arange(5.0)))
    np.testing.assert_array_equal(x.data, [[0, 1, 2], [3, 4, 7]])
    np.testing.assert_array_equal(y.data, [7, 7, 7])
    with pytest.raises(ValueError, match="rank 0 of 2 holds elements 0 to 5 of 9, but "
                                         "its pieces have 4"):
        dist.Allgather("world", [(2, 3), (3,)])(Variable(np.arange(4.0)))
    with pytest.raises(TypeError, match="reduce_scatter: op='mean' of int64"):
        dist.ReduceScatter("world", "mean")(Variable(np.arange(3)))


def test_reduce_scatter_and_allgather_are_each_other_s_backward(rank0_of_2):
    # The partner's gradients are 7s here too: what comes back from its block.
    a, b = Variable(np.arange(6.0).reshape(2, 3)), Variable(np.array([10.0, 20.0, 30.0]))
    y = dist.ReduceScatter("world", "mean")(a, b)
    F.sum(y * 3.0).backward()
    np.testing.assert_array_equal(a.grad.data, [[1.5, 1.5, 1.5], [1.5, 1.5, 3.5]])
    np.testing.assert_array_equal(b.grad.data, [3.5, 3.5, 3.5])
    piece = Variable(np.arange(5.0))
    x, _ = dist.Allgather("world", ((2, 3), (3,)))(piece)
    F.sum(x * 2.0).backward()  # the second output unused: no gradient of it here
    np.testing.assert_array_equal(piece.grad.data, [9, 9, 9, 9, 9])


def sharded_or_hooked(comm, sharded, traced, steps=4, hooks=(),
                      make=lambda: optimizers.Adam(alpha=0.01)):
    """The parameters after `steps` Adam steps (or another optimizer's) of an MLP,
    with the gradients averaged by AllreduceGrads or the update sharded."""
    x, t = classification()
    np.random.seed(0)
    model = MLP((8, 3))
    model(x[:1])
    optimizer = make()
    if sharded:
        optimizer = dist.ShardedOptimizer(optimizer, comm).setup(model)
    else:
        optimizer.setup(model).add_hook(dist.AllreduceGrads(comm))
    for hook in hooks:
        optimizer.add_hook(hook)
    step = training_step(model, optimizer)
    step = dezero.trace(step) if traced else step
    losses = [float(step(x, t).data) for _ in range(steps)]
    return losses, [p.data.copy() for p in model.params()], step, optimizer


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_a_sharded_update_ends_with_the_hook_s_parameters_to_the_bit(comm, traced):
    hooks = [optimizers.WeightDecay(0.1)]
    losses, params, _, optimizer = sharded_or_hooked(comm, True, traced, hooks=hooks)
    expected_losses, expected, _, _ = sharded_or_hooked(comm, False, False, hooks=hooks)
    assert optimizer.t == 4 and optimizer.alpha == 0.01
    if traced:  # fused kernels may round a last bit otherwise than numpy
        np.testing.assert_allclose(losses, expected_losses, rtol=1e-6)
    for a, b in zip(params, expected):
        if traced:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "traced"])
def test_a_sharded_adamw_decays_the_pieces_of_matrices_only(comm, traced):
    # A piece is a flat slice of one parameter: AdamW judged it, one-dimensional, a
    # vector, and decayed none of the matrices, in silence.
    def make():
        return optimizers.AdamW(alpha=0.01, weight_decay=0.5)

    _, params, _, _ = sharded_or_hooked(comm, True, traced, make=make)
    _, expected, _, _ = sharded_or_hooked(comm, False, False, make=make)
    for a, b in zip(params, expected):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_traced_sharded_step_scatters_then_updates_then_gathers(comm):
    *_, step, optimizer = sharded_or_hooked(comm, True, True, steps=3)
    ops = [n for n in step.graph.nodes if n.kind == "op"]
    scatter, = [n for n in ops if n.op == "reduce_scatter"]
    gather, = [n for n in ops if n.op == "allgather"]
    assert scatter.record.collective and gather.record.collective
    assert scatter.attrs == {"comm": "world", "op": "mean"}
    assert gather.attrs["shapes"] == ((3, 8), (8,), (8, 3), (3,))
    assert len(scatter.inputs) == 4 and len(scatter.outputs) == 1  # all at once
    assert len(gather.inputs) == len(gather.outputs) == 4
    a, b = ops.index(scatter), ops.index(gather)
    assert any(n.op == "matmul" for n in ops[:a])
    assert not any(n.op == "matmul" for n in ops[a:])
    assert any(n.op == "sqrt" for n in ops[a:b]) and not any(n.op == "sqrt" for n in ops[b:])
    text = str(step.graph)
    assert text.count("= reduce_scatter(") == text.count("= allgather(") == 1
    assert "model.l0.W <- " + gather.outputs[0].name in text
    assert "opt.ms[pieces['l0/W[0:24]']]" in text.replace("optimizer.optimizer", "opt")
    optimizer.alpha = 0.5  # through to the optimizer: the next replay reads it
    assert optimizer.optimizer.alpha == 0.5


def test_a_saved_sharded_step_loads_with_its_collectives_types_checked(rank0_of_2, tmp_path):
    # a collective cannot run at load (it would exchange): its types rule gives what
    # load() checks the file's declared results against, a block of this rank's length
    import json
    *_, step, _ = sharded_or_hooked(rank0_of_2, True, True, steps=1)
    path = tmp_path / "g.json"
    step.graph.save(str(path))
    loaded = dezero.static.StaticGraph.load(str(path))
    assert {"reduce_scatter", "allgather"} <= {n.op for n in loaded.of_kind("op")}
    description = json.loads(path.read_text())
    scatter = next(n for n in description["nodes"] if n.get("op") == "reduce_scatter")
    scatter["outputs"][0]["shape"] = [scatter["outputs"][0]["shape"][0] + 1]
    path.write_text(json.dumps(description))
    with pytest.raises(GraphFileError, match=r"reduce_scatter of .* makes f32\[30\], where "
                                             r"the file declares f32\[31\]$"):
        dezero.static.StaticGraph.load(str(path))


def test_a_schedule_sets_the_rate_of_a_sharded_optimizer(comm):
    # The schedules looked for lr or alpha on the optimizer's class: ShardedOptimizer
    # has them through its optimizer only, and StepDecay said it had no learning rate.
    from dezero import schedules
    for inner, name in ((optimizers.Adam(alpha=0.01), "alpha"), (optimizers.SGD(lr=0.01), "lr")):
        optimizer = dist.ShardedOptimizer(inner, comm)
        schedule = schedules.StepDecay(optimizer, step_size=1, gamma=0.5)
        schedule.step()
        assert getattr(inner, name) == 0.005
    with pytest.raises(TypeError, match="ShardedOptimizer has no learning rate"):
        schedules.StepDecay(dist.ShardedOptimizer(optimizers.AdaDelta(), comm), step_size=1)


def test_a_sharded_update_refuses_hooks_that_need_the_whole_gradient(comm):
    optimizer = dist.ShardedOptimizer(optimizers.SGD(), comm)
    optimizer.add_hook(optimizers.WeightDecay(0.1))
    for hook in (optimizers.ClipGrad(1.0), optimizers.FreezeParam(), dist.AllreduceGrads(comm)):
        with pytest.raises(TypeError, match=f"hook {type(hook).__name__} would see only "
                                            f"this rank's block.*AllreduceGrads"):
            optimizer.add_hook(hook)
    inner = optimizers.SGD()
    inner.add_hook(optimizers.ClipGrad(1.0))
    with pytest.raises(TypeError, match="hook ClipGrad"):
        dist.ShardedOptimizer(inner, comm)
    with pytest.raises(TypeError, match=r"wraps an optimizer, got MLP"):
        dist.ShardedOptimizer(MLP((3,)), comm)
    with pytest.raises(NotImplementedError, match="state of its own block"):
        optimizer.state_dict()


def test_a_sharded_update_refuses_a_model_that_changed_after_the_first_update(comm):
    x, t = classification()
    model = MLP((8, 3))
    optimizer = dist.ShardedOptimizer(optimizers.Adam(), comm).setup(model)
    step = training_step(model, optimizer)
    step(x, t)
    model.extra = dezero.Parameter(np.ones(2, np.float32))
    with pytest.raises(ValueError, match=r"parameters changed since the first update "
                                         r"\(4 then, 5 now; parameter 4: none then, "
                                         r"float32\[2\] now\)"):
        step(x, t)
    # The same number of parameters: the message says which one changed, and how.
    del model.extra
    model.l0.W.data = model.l0.W.data.astype(np.float64)
    with pytest.raises(ValueError, match=r"\(4 then, 4 now; parameter 0: float32\[3, 8\] "
                                         r"then, float64\[3, 8\] now\)"):
        step(x, t)
    model.l1.b = dezero.Parameter(np.zeros(3, np.float32))
    model.l0.W.data = model.l0.W.data.astype(np.float32)
    with pytest.raises(ValueError, match=r"parameter 3: another Parameter of float32\[3\]"):
        step(x, t)


def test_a_sharded_update_of_a_target_that_is_not_a_layer(comm):
    # A target with params() only has no paths to name its parameters by: the pieces
    # of two layers' W (and b) took one name, so one piece and one Adam state served
    # both layers, and their parameters ended wrong.
    class Both:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def params(self):
            yield from self.a.params()
            yield from self.b.params()

    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    runs = []
    for sharded in (False, True):
        np.random.seed(0)
        a, b = dezero.layers.Linear(3, in_size=3), dezero.layers.Linear(3, in_size=3)
        optimizer = optimizers.Adam(alpha=0.1)
        if sharded:
            optimizer = dist.ShardedOptimizer(optimizer, comm)
        optimizer.setup(Both(a, b))
        for _ in range(3):
            loss = F.sum(b(F.tanh(a(x))) ** 2)
            a.cleargrads()
            b.cleargrads()
            loss.backward()
            optimizer.update()
        runs.append([p.data.copy() for p in (a.W, a.b, b.W, b.b)])
    for hooked, sharded in zip(*runs):
        np.testing.assert_array_equal(sharded, hooked)


def test_a_sharded_update_leaves_a_parameter_without_a_gradient_alone(comm):
    x, t = classification()
    runs = []
    for sharded in (False, True):
        np.random.seed(0)
        model = MLP((8, 3))
        model(x[:1])
        model.spare = dezero.Parameter(np.ones(3, np.float32), name="spare")
        optimizer = optimizers.Adam()
        if sharded:
            optimizer = dist.ShardedOptimizer(optimizer, comm)
        optimizer.setup(model).add_hook(optimizers.WeightDecay(0.1))
        step = training_step(model, optimizer)
        for _ in range(3):
            step(x, t)
        runs.append([p.data.copy() for p in model.params()])
    np.testing.assert_array_equal(runs[1][-1], 1.0)
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_alone_the_allgather_returns_whole_pieces_and_kept_weights_keep_their_values(comm):
    # A world of one: each piece is a whole parameter, so the new weights are the
    # pieces' memory (no copy). An array kept from before a step keeps its values.
    pieces = [np.arange(6.0), np.arange(3.0)]
    x, y = dist.Allgather("world", ((2, 3), (3,)))(*[Variable(p) for p in pieces])
    assert np.shares_memory(x.data, pieces[0]) and np.shares_memory(y.data, pieces[1])
    x, t = classification()
    runs = []
    for traced in (False, True):
        np.random.seed(0)
        model = MLP((8, 3))
        model(x[:1])
        optimizer = dist.ShardedOptimizer(optimizers.Adam(alpha=0.01), comm).setup(model)
        step = training_step(model, optimizer)
        step = dezero.trace(step) if traced else step
        kept = []
        for _ in range(4):
            kept.append([(p.data, p.data.copy()) for p in model.params()])
            step(x, t)
        for arrays in kept:
            for array, values in arrays:
                np.testing.assert_array_equal(array, values)
        runs.append([p.data for p in model.params()])
    for a, b in zip(*runs):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_rank_whose_block_is_empty_still_counts_the_update(comm, monkeypatch):
    # One element for two ranks: rank 1's block is empty, yet Adam's step count must
    # advance with rank 0's, and the parameter comes back from rank 0's block.
    monkeypatch.setattr(comm, "size", 2)
    monkeypatch.setattr(comm, "rank", 1)
    sent = []

    def exchange(flat, what, op, root, out=None):
        sent.append((what, flat.size))
        if what == "allgather":
            flat[:1] = 5.0  # rank 0's new value

    monkeypatch.setattr(comm, "_mpi_exchange", exchange)
    w = dezero.Parameter(np.array([1.0], np.float32), name="w")
    model = dezero.Layer()
    model.w = w
    optimizer = dist.ShardedOptimizer(optimizers.Adam(), comm).setup(model)
    w.grad = Variable(np.array([0.5], np.float32))
    optimizer.update()
    # (which parameters have a gradient somewhere, then the gradients, then the values)
    assert sent == [("allreduce", 1), ("reduce_scatter", 2), ("allgather", 2)]
    assert optimizer.t == 1 and optimizer.pieces == {}
    np.testing.assert_array_equal(w.data, [5.0])


@pytest.mark.parametrize("rank", [0, 1])
def test_every_rank_keeps_the_first_recording_of_a_sharded_step(comm, monkeypatch, rank):
    # Ranks must record a step as many times as each other: one recording it again
    # while the others replay it makes exchanges they skip, and they wait forever.
    # With one element for two ranks, rank 1's block is empty and it kept its first
    # recording, where rank 0's pieces got their first values in it, so rank 0 did not.
    monkeypatch.setattr(comm, "size", 2)
    monkeypatch.setattr(comm, "rank", rank)

    def exchange(flat, what, op, root, out=None):
        if what == "reduce_scatter":
            out[...] = flat[:out.size]
        elif what == "allgather":
            flat[:1] = 0.25  # rank 0's new value

    monkeypatch.setattr(comm, "_mpi_exchange", exchange)
    model = dezero.Layer()
    model.w = dezero.Parameter(np.array([0.5], np.float32), name="w")
    optimizer = dist.ShardedOptimizer(optimizers.Adam(), comm).setup(model)

    @dezero.trace
    def step(x):
        loss = F.sum((x * model.w) ** 2)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss

    step(np.arange(3, dtype=np.float32))
    assert step.entries == 1
    np.testing.assert_array_equal(model.w.data, [0.25])


# =============================================================================
# The exchange through shared memory, its ranks played by threads
# =============================================================================


def shared_exchanges(size, capacity, late=0.0):
    """`size` exchangers over one memory, as the ranks of one machine hold them, with
    a threading barrier for MPI's; the last rank goes on `late` seconds after each."""
    import threading
    import time
    barrier = threading.Barrier(size, timeout=10)
    memory = np.zeros((1 + 2 * size, capacity), np.uint8)  # the result, two sets of slots
    passed = np.zeros((2, size, 3), np.int64)  # what each rank passed, in each set

    class Threaded(dist._SharedExchange):
        def _synchronize(self):
            barrier.wait()
            if self.rank == self.size - 1:
                time.sleep(late)

    ranks = []
    for rank in range(size):
        ex = Threaded.__new__(Threaded)
        ex.rank, ex.size, ex.capacity, ex.memory, ex.exchanges = rank, size, capacity, memory, 0
        ex.passed = passed
        ex.mpi = type("Mpi", (), {"Barrier": staticmethod(barrier.wait),
                                  "bcast": staticmethod(lambda value: bool(value))})()
        ranks.append(ex)
    return ranks


def on_all_ranks(ranks, run):
    """run(rank's exchanger) on a thread per rank; their results in rank order."""
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(len(ranks)) as pool:
        return [f.result() for f in [pool.submit(run, ex) for ex in ranks]]


@pytest.mark.parametrize("size", [2, 3, 4])
@pytest.mark.parametrize("n", [1, 5, 12, 37])
def test_shared_memory_exchanges_give_every_rank_the_reduction(size, n):
    ranks = shared_exchanges(size, 64 * 8)
    xs = [np.random.default_rng(r).integers(-50, 50, n).astype(np.float64) for r in range(size)]
    for op, expected in (("sum", np.sum(xs, 0)), ("max", np.max(xs, 0)),
                         ("min", np.min(xs, 0))):
        def allreduce(ex, op=op):
            flat = xs[ex.rank].copy()
            ex.exchange(flat, "allreduce", op)
            return flat
        for y in on_all_ranks(ranks, allreduce):
            np.testing.assert_array_equal(y, expected, err_msg=op)
    # An allreduce into out, of an array packed as Communicator packs: every rank's
    # block but its own into its slot (not copied over), its own into out.
    def into_out(ex):
        flat, out = ex.slot(np.int32, n), np.full(n, ex.rank + 1, np.int32)
        block = -(-n // size)
        flat[...] = ex.rank + 1
        flat[ex.rank * block:(ex.rank + 1) * block] = -1000  # not read: out holds it
        ex.exchange(flat, "allreduce", "sum", out=out)
        return out
    for y in on_all_ranks(ranks, into_out):
        np.testing.assert_array_equal(y, np.full(n, size * (size + 1) // 2))
    # reduce_scatter and allgather: blocks of len(flat) / size
    padded = -(-n // size) * size
    whole = np.sum([np.resize(x, padded) for x in xs], 0)

    def scatter_then_gather(ex):
        block = padded // size
        mine = np.empty(block)
        ex.exchange(np.resize(xs[ex.rank], padded), "reduce_scatter", "sum", out=mine)
        np.testing.assert_array_equal(mine, whole[ex.rank * block:(ex.rank + 1) * block])
        flat = np.zeros(padded)
        ex.exchange(mine, "allgather", "sum", out=flat)  # this rank's block, everyone's
        return flat
    for y in on_all_ranks(ranks, scatter_then_gather):
        np.testing.assert_array_equal(y, whole)
    assert [ex.exchanges for ex in ranks] == [6] * size


@pytest.mark.parametrize("size", [2, 3, 4])
def test_communicators_on_one_machine_exchange_through_the_shared_memory(size):
    # Each rank packs every block but its own into its slot and its own straight into
    # its result; the arrays' sizes put the blocks' edges inside arrays.
    ranks = shared_exchanges(size, 64 * 8)
    shapes = [(3, 5), (7,), (1,), (2, 2)]
    data = [[np.random.default_rng(r * 10 + i).integers(-9, 9, shape) * size * 1.0
             for i, shape in enumerate(shapes)] for r in range(size)]
    sums = [sum(arrays[i] for arrays in data) for i in range(len(shapes))]

    def exchanges(ex):
        comm = dist.Communicator.__new__(dist.Communicator)
        comm.rank, comm.size, comm._shared, comm._nccl = ex.rank, ex.size, ex, None
        block = comm._reduce_scatter(data[ex.rank], "mean")
        return (comm._reduce_arrays(data[ex.rank], "sum"),
                comm._reduce_arrays(data[ex.rank], "mean"),
                comm._allgather([block], shapes))

    for summed, means, gathered in on_all_ranks(ranks, exchanges):
        for i, total in enumerate(sums):
            np.testing.assert_array_equal(summed[i], total)
            np.testing.assert_array_equal(means[i], total / size)
            np.testing.assert_array_equal(gathered[i], total / size)
    assert [ex.exchanges for ex in ranks] == [4] * size


@pytest.mark.parametrize("size", [2, 3])
def test_a_rank_may_begin_the_next_exchange_while_a_late_one_still_reads(size):
    # No exchange ends with a barrier: the last rank reads the slots late after every
    # barrier while the others pack their next exchange, into the other set of slots.
    ranks = shared_exchanges(size, 64 * 8, late=0.002)
    n = 4 * size

    def steps(ex):
        seen = []
        for step in range(6):
            x = np.arange(n, dtype=np.float64) + 100 * step + ex.rank
            mine = np.empty(n // size)
            ex.exchange(x.copy(), "reduce_scatter", "sum", out=mine)
            gathered = np.empty(n)
            ex.exchange(mine, "allgather", "sum", out=gathered)
            summed = x.copy()
            ex.exchange(summed, "allreduce", "sum")
            seen += [gathered, summed]
        return seen

    expected = []
    for step in range(6):
        whole = sum(np.arange(n, dtype=np.float64) + 100 * step + r for r in range(size))
        expected += [whole, whole]
    for seen in on_all_ranks(ranks, steps):
        for got, want in zip(seen, expected):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("size", [2, 3])
def test_ranks_passing_arrays_of_different_sizes_are_told(size):
    # MPI's allreduce refuses them ("message truncated"); through the window each rank
    # read the others' slots as far as its own size, and returned a wrong sum.
    ranks = shared_exchanges(size, 64 * 8)

    def allreduce(ex):
        comm = dist.Communicator.__new__(dist.Communicator)
        comm.rank, comm.size, comm._shared, comm._nccl = ex.rank, ex.size, ex, None
        with pytest.raises(ValueError) as error:
            comm.allreduce(np.arange(3.0 + 2 * (ex.rank == 1)))
        return str(error.value)

    for message in on_all_ranks(ranks, allreduce):
        assert f"allreduce: the {size} ranks reached different exchanges (" in message
        assert "rank 0: allreduce of 3 float64, rank 1: allreduce of 5 float64" in message
        assert "same shapes and dtypes, in the same order" in message


def test_a_rank_recording_a_traced_step_while_another_replays_it_is_told():
    # A rank given a batch of another shape records the step again while the others
    # replay it: its exchange of gradient flags met their exchange of gradients (here
    # of as many bytes), and they waited for each other or added flags to gradients.
    ranks = shared_exchanges(2, 64 * 8)

    def exchange(ex):
        comm = dist.Communicator.__new__(dist.Communicator)
        comm.rank, comm.size, comm._shared, comm._nccl = ex.rank, ex.size, ex, None
        with pytest.raises(ValueError) as error:
            if ex.rank == 0:
                comm.allreduce(np.ones(4, np.float32), op="mean")
            else:
                comm._any_rank([True] * 16)
        return str(error.value)

    for message in on_all_ranks(ranks, exchange):
        assert "rank 0: allreduce of 4 float32, rank 1: allreduce of 16 uint8" in message
        assert "a traced step with the same shapes on every rank" in message
    # Two spellings of one dtype exchange as one (as they do through MPI).
    def spellings(ex):
        comm = dist.Communicator.__new__(dist.Communicator)
        comm.rank, comm.size, comm._shared, comm._nccl = ex.rank, ex.size, ex, None
        return comm.allreduce(np.ones(3, np.longlong if ex.rank else np.int64))
    for y in on_all_ranks(ranks, spellings):
        np.testing.assert_array_equal(y, [2, 2, 2])


@pytest.mark.parametrize("size", [2, 3])
def test_an_allgather_in_place_goes_through_the_shared_memory(size):
    # cupy arrays where NCCL is missing are staged through host arrays and gathered in
    # place (each rank's block already in its place in the whole): the window's
    # exchange took only the form with a separate result, and raised AttributeError.
    ranks = shared_exchanges(size, 64 * 8)
    block = 3

    def gather(ex):
        comm = dist.Communicator.__new__(dist.Communicator)
        comm.rank, comm.size, comm._shared, comm._nccl = ex.rank, ex.size, ex, None
        flat = np.full(block * size, -1.0)
        flat[ex.rank * block:(ex.rank + 1) * block] = np.arange(block) + 10 * ex.rank
        comm._exchange(flat, "allgather")
        return flat

    expected = np.concatenate([np.arange(block) + 10 * r for r in range(size)])
    for flat in on_all_ranks(ranks, gather):
        np.testing.assert_array_equal(flat, expected)
    assert [ex.exchanges for ex in ranks] == [1] * size


def test_an_exchange_too_large_for_the_shared_memory_goes_through_mpi(comm, monkeypatch):
    assert dist._shared_memory_holds(1) and not dist._shared_memory_holds(2 ** 62)
    monkeypatch.setattr(dist, "_shared_memory_holds", lambda nbytes: False)
    ex = shared_exchanges(2, 0)[0]  # an empty window, to be grown
    assert ex.slot(np.float32, 10) is None
    x = np.arange(10.0)
    assert ex.exchange(x, "allreduce", "sum") is False and ex.exchanges == 0
    monkeypatch.setattr(comm, "_shared", ex)
    np.testing.assert_array_equal(comm.allreduce(x), x)  # MPI's, in a world of one
    assert ex.exchanges == 0 and ex.capacity == 0
