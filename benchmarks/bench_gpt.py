"""A small GPT: dezero eager and traced against PyTorch eager, torch.compile and JAX jit.

Run by hand: python benchmarks/bench_gpt.py [--rounds 7] [--threads both|one|all]
             python benchmarks/bench_gpt.py --train 500
             python benchmarks/bench_gpt.py --generation [--tokens 200]
Prints, for one thread (the process pinned to one core, as `taskset -c 0` does, and one
BLAS, OpenMP and torch thread) and for all threads, each in a fresh process of its own:
- one training step of models.GPT (vocab 65, block 64, 4 layers, 4 heads, n_embd 128,
  batch 16, float32: forward, cross entropy, backward, AdamW) in dezero eager, dezero
  traced (the replay once its kernels are compiled; backend DEZERO_BACKEND, else cpu),
  PyTorch eager, torch.compile (inductor, model and optimizer step) and jax.jit
  (value_and_grad and AdamW in jax.numpy), all from the same weights on the same batches;
- the forward pass alone (inference) of the five;
- generating 200 tokens (tokens/s): dezero's model.generate, a traced forward called on
  the growing context with a graph per length (dynamic=False) and with the length
  symbolic (automatic dynamic: two graphs), a traced forward over a fixed window, and a
  loop in PyTorch eager (--generation times this alone);
- the peak of numpy's memory (tracemalloc) in one eager step and in one replay;
then the targets, met or not. Times are medians over interleaved rounds (timing.py): the
process's CPU time on one thread, wall time on all.
--train N trains dezero (traced) and the same model in PyTorch eager from the same weights
on the same batches for N steps (one thread unless --threads all), and prints both losses.
torch and jax are each skipped, saying so, where they are not installed.
"""
import os
import sys


def _threads_argument():
    # Read before numpy is imported: thread counts are fixed when a library loads.
    # --train runs on one thread unless told otherwise (the same numbers, less noise).
    args = sys.argv[1:]
    i = args.index("--threads") if "--threads" in args[:-1] else -1
    return args[i + 1] if i >= 0 else "one" if "--train" in args else "both"


if _threads_argument() == "one":
    # One core for every thread of the process and of those it starts (as taskset -c 0;
    # XLA's thread pool sizes itself by the cores it may use), one thread per library.
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_name] = "1"

import argparse  # noqa: E402
import collections  # noqa: E402
import logging  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from timing import interleaved_median  # noqa: E402

import dezero  # noqa: E402
import dezero.functions as F  # noqa: E402
from dezero import datasets, models, optimizers  # noqa: E402
from dezero.static import backends  # noqa: E402

CONFIG = dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128)
BATCH = 16
# AdamW as nanoGPT's small character model. eps is added to sqrt(v) before the bias
# correction in dezero, after it in PyTorch and here in JAX: dezero's acts as up to 10
# times as large (1e-7 at t = 1), which --train 500 does not see (README).
LR, BETA1, BETA2, EPS, WEIGHT_DECAY = 1e-3, 0.9, 0.99, 1e-8, 0.1


def optional(name):
    try:
        return __import__(name)
    except ImportError:
        return None


# =============================================================================
# Data and weights
# =============================================================================


def corpus():
    """CharText of the default corpus (Python's library sources, 95 characters) with
    its rarest characters written as one, so that the vocabulary has vocab_size (65,
    the size of the small character models' Shakespeare)."""
    text = datasets.python_source_text()
    counts = collections.Counter(text).most_common()
    kept = CONFIG["vocab_size"] - 1
    if len(counts) > kept + 1:
        stand_in = counts[kept][0]  # the commonest of the rare ones
        text = text.translate({ord(ch): stand_in for ch, _ in counts[kept + 1:]})
    data = datasets.CharText(text, block_size=CONFIG["block_size"])
    assert data.vocab_size == CONFIG["vocab_size"], data.vocab_size
    return data


def batches(count, seed=0):
    """count (x, t) training batches of the corpus, drawn with a fixed rng."""
    data, rng = corpus(), np.random.default_rng(seed)
    return [data.get_batch(BATCH, rng) for _ in range(count)]


def initial_weights(seed=0):
    """GPT-2's initialisation as models.GPT draws it: {"wte/W": array, ...}."""
    np.random.seed(seed)
    return models.GPT(**CONFIG).state_dict()


def feeding(step, batches):
    """A call that runs step on the next of the batches, round and round."""
    position = [-1]

    def run():
        position[0] = (position[0] + 1) % len(batches)
        return step(*batches[position[0]])
    return run


# =============================================================================
# dezero
# =============================================================================


def dezero_gpt(weights):
    model = models.GPT(**CONFIG)
    model.load_state_dict(weights)
    return model


def dezero_step(model):
    optimizer = optimizers.AdamW(LR, BETA1, BETA2, EPS, WEIGHT_DECAY).setup(model)

    def step(x, t):
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        return loss
    return step


def forward_of(model):
    def gpt_forward(ids):
        return model(ids)
    return gpt_forward


def traced_forward(model, example):
    """A trace of model's forward (no_grad, test_mode) recorded on example, its kernels
    compiled."""
    forward = dezero.trace(forward_of(model))
    with inference_mode():
        forward(example)
    forward.graph.compile().wait()
    return forward


class inference_mode:
    """no_grad and test_mode where on is true."""

    def __init__(self, on=True):
        self.modes = (dezero.no_grad(), dezero.test_mode()) if on else ()

    def __enter__(self):
        for mode in self.modes:
            mode.__enter__()

    def __exit__(self, *exc):
        for mode in reversed(self.modes):
            mode.__exit__(*exc)


def sample(logits, rng):
    """An index drawn from softmax(logits) (float64, as model.generate)."""
    p = np.exp(logits.astype(np.float64) - logits.max())
    cumulative = np.cumsum(p)
    return min(int(np.searchsorted(cumulative, rng.random() * cumulative[-1], "right")),
               len(p) - 1)


def traced_generation(forward, tokens, rng, window=False):
    """tokens new ids after id 0 through a traced forward: called on the context cropped
    to block_size (a new shape, so a new graph, at each length up to it), or with window,
    on the context written into a fixed (1, block_size) window (the rest zeros): causal
    attention leaves the logits at the context's last position as they are."""
    block = CONFIG["block_size"]
    ids = np.zeros((1, 1), np.int64)
    padded = np.zeros((1, block), np.int64)
    with inference_mode():
        for _ in range(tokens):
            context = ids[:, -block:]
            n = context.shape[1]
            if window:
                padded[:, :n] = context
                logits = forward(padded).data[0, n - 1]
            else:
                logits = forward(context).data[0, -1]
            ids = np.concatenate([ids, [[sample(logits, rng)]]], axis=1)
    return ids


# =============================================================================
# PyTorch
# =============================================================================


def torch_gpt(torch, weights):
    """models.GPT in torch.nn (nn.Linear, nn.LayerNorm, nn.Embedding, the fused
    scaled_dot_product_attention), its modules named as dezero's, loaded with weights."""
    nn = torch.nn
    V, T, C, H = (CONFIG[k] for k in ("vocab_size", "block_size", "n_embd", "n_head"))

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (part.view(B, T, H, C // H).transpose(1, 2)
                       for part in self.qkv(x).split(C, dim=-1))
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(B, T, C))

    class FeedForward(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            return self.proj(nn.functional.gelu(self.fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.attn = nn.LayerNorm(C), Attention()
            self.ln2, self.mlp = nn.LayerNorm(C), FeedForward()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(CONFIG["n_layer"]))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, ids):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            return nn.functional.linear(self.ln_f(x), self.wte.weight)  # tied

    model = GPT()
    model.load_state_dict({torch_name(key): torch.from_numpy(
        array.T.copy() if key.endswith("/W") and key.count("/") > 1 else array.copy())
        for key, array in weights.items()})
    return model


def torch_name(key):
    """dezero's name of a parameter -> torch's: blocks/0/attn/qkv/W -> blocks.0.attn.qkv.weight."""
    *path, last = key.split("/")
    return ".".join([*path, {"W": "weight", "b": "bias", "gamma": "weight",
                             "beta": "bias"}[last]])


def torch_step(torch, model, compiled=False):
    """One training step of a torch model; compiled: the model and the optimizer's step
    under torch.compile."""
    groups = [{"params": [p for p in model.parameters() if p.ndim >= 2]},
              {"params": [p for p in model.parameters() if p.ndim < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=(BETA1, BETA2), eps=EPS,
                                  weight_decay=WEIGHT_DECAY)
    forward, update = model, optimizer.step
    if compiled:
        # Without this, dynamo says once that it skips the optimizer's profiler hook.
        torch._logging.set_logs(dynamo=logging.ERROR)
        forward, update = torch.compile(model), torch.compile(optimizer.step)
    V = CONFIG["vocab_size"]

    def step(x, t):
        loss = torch.nn.functional.cross_entropy(forward(x).view(-1, V), t.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        update()
        return loss
    return step


def torch_generation(torch, model, tokens, generator):
    block = CONFIG["block_size"]
    ids = torch.zeros((1, 1), dtype=torch.long)
    with torch.inference_mode():
        for _ in range(tokens):
            logits = model(ids[:, -block:])[:, -1]
            chosen = torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)
            ids = torch.cat([ids, chosen], dim=1)
    return ids


# =============================================================================
# JAX
# =============================================================================


def jax_gpt(jax):
    """(forward, step): the GPT as a pure function of a params dict (dezero's names and
    layouts), and one jitted training step with AdamW written in jax.numpy."""
    jnp = jax.numpy
    C, H = CONFIG["n_embd"], CONFIG["n_head"]

    def layer_norm(x, gamma, beta):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * gamma + beta

    def forward(p, ids):
        B, T = ids.shape
        x = p["wte/W"][ids] + p["wpe/W"][:T]
        causal = jnp.tril(jnp.ones((T, T), bool))
        for i in range(CONFIG["n_layer"]):
            b = f"blocks/{i}/"
            h = layer_norm(x, p[b + "ln1/gamma"], p[b + "ln1/beta"])
            qkv = h @ p[b + "attn/qkv/W"] + p[b + "attn/qkv/b"]
            q, k, v = (part.reshape(B, T, H, C // H).transpose(0, 2, 1, 3)
                       for part in jnp.split(qkv, 3, axis=-1))
            scores = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(C // H),
                               -jnp.inf)
            y = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3)
            x = x + y.reshape(B, T, C) @ p[b + "attn/proj/W"] + p[b + "attn/proj/b"]
            h = layer_norm(x, p[b + "ln2/gamma"], p[b + "ln2/beta"])
            h = jax.nn.gelu(h @ p[b + "mlp/fc/W"] + p[b + "mlp/fc/b"], approximate=True)
            x = x + h @ p[b + "mlp/proj/W"] + p[b + "mlp/proj/b"]
        return layer_norm(x, p["ln_f/gamma"], p["ln_f/beta"]) @ p["wte/W"].T

    def loss_fn(p, x, t):
        log_p = jax.nn.log_softmax(forward(p, x), axis=-1)
        return -jnp.take_along_axis(log_p, t[..., None], axis=-1).mean()

    @jax.jit
    def step(p, m, v, count, x, t):
        loss, g = jax.value_and_grad(loss_fn)(p, x, t)
        count = count + 1
        m = {k: BETA1 * m[k] + (1 - BETA1) * g[k] for k in p}
        v = {k: BETA2 * v[k] + (1 - BETA2) * g[k] * g[k] for k in p}
        c1, c2 = 1 - BETA1 ** count, 1 - BETA2 ** count
        p = {k: (p[k] * (1 - LR * WEIGHT_DECAY) if p[k].ndim >= 2 else p[k])
             - LR * (m[k] / c1) / (jnp.sqrt(v[k] / c2) + EPS) for k in p}
        return p, m, v, count, loss
    return jax.jit(forward), step


def jax_training(jax, weights):
    """A call that runs one jitted step on the next batch, keeping params and moments."""
    _, step = jax_gpt(jax)
    zeros = {k: np.zeros_like(w) for k, w in weights.items()}
    state = [jax.device_put(weights), jax.device_put(zeros), jax.device_put(zeros),
             np.float32(0)]

    def run(x, t):
        *state[:], loss = step(*state, x, t)  # the new params, moments and count
        return loss.block_until_ready()
    return run


# =============================================================================
# The tables
# =============================================================================


def report(title, times, unit_scale=1e3, unit="ms"):
    print(title)
    for name, seconds in times.items():
        print(f"  {name:16s} {seconds * unit_scale:9.2f} {unit}")


def bench_training(weights, data, rounds, clock, torch, jax):
    """Median ms of one training step of each candidate, each on its own copy of the
    weights and the same sequence of batches. Each first takes one step on the first
    batch (recording or compiling), whose loss is printed: the same model, the same
    number."""
    steps, firsts = {}, []

    def first_step(name, step, batches):
        start = time.perf_counter()
        loss = step(*batches[0])
        loss = float(loss.data) if isinstance(loss, dezero.Variable) else loss.item()
        firsts.append(f"{name} {time.perf_counter() - start:.1f} s, loss {loss:.6f}")
        steps[name] = feeding(step, batches)

    eager = dezero_step(dezero_gpt(weights))
    first_step("dezero eager", eager, data)
    replay = dezero.trace(dezero_step(dezero_gpt(weights)))
    first_step("dezero traced", replay, data)
    start = time.perf_counter()
    replay.graph.compile().wait()
    firsts[-1] += f" (then {time.perf_counter() - start:.1f} s until its kernels are ready)"
    if torch is not None:
        torch_data = [(torch.from_numpy(x), torch.from_numpy(t)) for x, t in data]
        for name, compiled in (("torch eager", False), ("torch.compile", True)):
            first_step(name, torch_step(torch, torch_gpt(torch, weights), compiled),
                       torch_data)
    if jax is not None:
        jax_data = [(jax.device_put(x.astype(np.int32)), jax.device_put(t.astype(np.int32)))
                    for x, t in data]
        first_step("jax.jit", jax_training(jax, weights), jax_data)
    print("first steps (record or compile; caches as found):\n  " + "\n  ".join(firsts))
    times = dict(zip(steps, interleaved_median(list(steps.values()), rounds * 1.0, rounds,
                                               clock)))
    report(f"training step, median of {rounds} rounds", times)
    return times, replay, eager


def bench_inference(weights, x, rounds, clock, torch, jax):
    """Median ms of the forward pass alone on one (16, 64) batch."""
    model = dezero_gpt(weights)
    calls = {}

    def eager():
        with inference_mode():
            return model(x)
    calls["dezero eager"] = eager
    forward = traced_forward(model, x)

    def replay():
        with inference_mode():
            return forward(x)
    calls["dezero traced"] = replay
    if torch is not None:
        tx = torch.from_numpy(x)
        for name, compiled in (("torch eager", False), ("torch.compile", True)):
            module = torch_gpt(torch, weights).eval()
            module = torch.compile(module) if compiled else module

            def run(module=module):
                with torch.inference_mode():
                    return module(tx)
            run()  # compiles
            calls[name] = run
    if jax is not None:
        jax_forward, jx = jax_gpt(jax)[0], jax.device_put(x.astype(np.int32))
        params = jax.device_put(weights)
        calls["jax.jit"] = lambda: jax_forward(params, jx).block_until_ready()
    times = dict(zip(calls, interleaved_median(list(calls.values()), rounds * 0.5, rounds,
                                               clock)))
    report(f"inference (forward of a ({BATCH}, {CONFIG['block_size']}) batch), median of "
           f"{rounds} rounds", times)
    return times


def bench_generation(weights, tokens, rounds, clock, torch):
    """Tokens/s generating `tokens` after one token, each candidate once a round (the
    rounds taking turns). The traced forwards called on the growing context are one
    trace each for all rounds, so their first round records their graphs, and is shown
    apart: per length (dynamic=False) a graph for each length, symbolic (automatic
    dynamic) one for the first length, then one of the length symbolic."""
    model = dezero_gpt(weights)
    growing = {"traced per length": dezero.trace(forward_of(model), dynamic=False),
               "traced, symbolic": dezero.trace(forward_of(model))}
    window = traced_forward(model, np.zeros((1, CONFIG["block_size"]), np.int64))
    runs = {"dezero generate": lambda: model.generate(np.zeros((1, 1), np.int64), tokens,
                                                      rng=np.random.default_rng(0)),
            **{name: lambda forward=forward: traced_generation(forward, tokens,
                                                               np.random.default_rng(0))
               for name, forward in growing.items()},
            "traced window": lambda: traced_generation(window, tokens,
                                                       np.random.default_rng(0), True)}
    if torch is not None:
        module = torch_gpt(torch, weights).eval()
        runs["torch eager"] = lambda: torch_generation(torch, module, tokens,
                                                       torch.Generator().manual_seed(0))
    seconds, outputs, caught = {name: [] for name in runs}, {}, []
    for r in range(rounds):
        names = list(runs)
        for name in names[r % len(names):] + names[:r % len(names)]:
            with warnings.catch_warnings(record=True) as found:
                warnings.simplefilter("always")
                start = clock()
                outputs[name] = runs[name]()
                seconds[name].append(clock() - start)
            caught += [str(w.message) for w in found]
    firsts = {name: seconds[name].pop(0) for name in growing}
    print(f"generation of {tokens} tokens, tokens/s (median of {rounds} rounds; the traced "
          f"per length and symbolic: of the rounds after their first)")
    for name, times in seconds.items():
        same = "" if name == "torch eager" else "  same tokens as dezero generate: " + (
            "yes" if np.array_equal(outputs[name], outputs["dezero generate"]) else "no")
        print(f"  {name:18s} {tokens / statistics.median(times):8.1f}{same}")
    for name, forward in growing.items():
        print(f"  {name}: {forward.entries} graphs kept (max_entries="
              f"{forward.max_entries}); its first round, which recorded them, "
              f"{tokens / firsts[name]:.1f} tokens/s" + (
                  " (the kernels' compiler runs in processes of its own, which the CPU "
                  "time of this one leaves out)" if clock is time.process_time else ""))
    for message in dict.fromkeys(caught):
        print(f"  warning: {message.splitlines()[0]}")


def peak_numpy_memory(fn):
    """The peak of memory traced by tracemalloc during one call of fn above what was
    traced when the call began, in MB: numpy arrays' buffers (numpy reports them to
    tracemalloc, those the compiled kernels write into included) and Python objects;
    not what BLAS or OpenMP allocate on their own."""
    fn()
    tracemalloc.start()
    try:
        fn()
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return (tracemalloc.get_traced_memory()[1] - base) / 1e6
    finally:
        tracemalloc.stop()


def verdict(met):
    return "met" if met else "NOT met"


def targets(train, peaks, one_thread):
    print("targets")
    traced_ms = train["dezero traced"]
    if one_thread:
        for other in ("jax.jit", "torch.compile"):
            if other in train:
                print(f"  traced step at most {other}'s (one thread): {traced_ms * 1e3:.2f} "
                      f"against {train[other] * 1e3:.2f} ms, {traced_ms / train[other]:.2f}x: "
                      f"{verdict(traced_ms <= train[other])}")
            else:
                print(f"  traced step at most {other}'s (one thread): not measured")
    speedup = train["dezero eager"] / traced_ms
    print(f"  traced step at least 2x faster than dezero eager: {speedup:.2f}x: "
          f"{verdict(speedup >= 2)}")
    if "torch eager" in train:
        ratio = train["dezero eager"] / train["torch eager"]
        print(f"  dezero eager within 1.3x of PyTorch eager: {ratio:.2f}x: "
              f"{verdict(ratio <= 1.3)}")
    eager_mb, replay_mb = peaks
    print(f"  replay's peak memory at most eager's: {replay_mb:.1f} against {eager_mb:.1f} "
          f"MB: {verdict(replay_mb <= eager_mb)}")


def thread_counts(torch):
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    parts = [f"cores {cores if isinstance(cores, int) else len(cores)}"]
    threadpoolctl = optional("threadpoolctl")
    if threadpoolctl is not None:
        for pool in threadpoolctl.threadpool_info():
            parts.append(f"{pool['internal_api']} {pool['num_threads']}")
    if torch is not None:
        parts.append(f"torch {torch.get_num_threads()}")
    return ", ".join(parts)


def bench_all(args):
    torch, jax = optional("torch"), optional("jax")
    one_thread = args.threads == "one"
    if torch is not None and one_thread:
        torch.set_num_threads(1)
    print(f"== {'one thread' if one_thread else 'all threads'}: {thread_counts(torch)}; "
          f"dezero backend {backends.DEFAULT}; numpy {np.__version__}"
          + (f", torch {torch.__version__}" if torch else ", torch not installed: skipped")
          + (f", jax {jax.__version__}" if jax else ", jax not installed (pip install jax): "
             "skipped"))
    # One thread: the process's CPU time, which leaves out the time other processes held
    # the core (every thread runs on one); all threads: wall time.
    clock = time.process_time if one_thread else time.perf_counter
    print(f"times: {'CPU time of the process' if one_thread else 'wall time'}")
    weights, data = initial_weights(), batches(8)
    if args.generation:
        bench_generation(weights, args.tokens, args.rounds, clock, torch)
        return
    train, replay, eager = bench_training(weights, data, args.rounds, clock, torch, jax)
    ratios = [f"eager/traced {train['dezero eager'] / train['dezero traced']:.2f}x"]
    for other in ("torch eager", "torch.compile", "jax.jit"):
        if other in train:
            ratios.append(f"traced/{other} {train['dezero traced'] / train[other]:.2f}x")
    if "torch eager" in train:
        ratios.append(f"eager/torch eager {train['dezero eager'] / train['torch eager']:.2f}x")
    print("  " + "  ".join(ratios))
    times = bench_inference(weights, data[0][0], args.rounds, clock, torch, jax)
    print(f"  eager/traced {times['dezero eager'] / times['dezero traced']:.2f}x" + "".join(
        f"  traced/{k} {times['dezero traced'] / times[k]:.2f}x" for k in times
        if not k.startswith("dezero")))
    bench_generation(weights, args.tokens, max(2, args.rounds // 2 + 1), clock, torch)
    x, t = data[0]
    peaks = peak_numpy_memory(lambda: eager(x, t)), peak_numpy_memory(lambda: replay(x, t))
    print(f"peak numpy memory of one training step (tracemalloc): eager {peaks[0]:.1f} MB, "
          f"replay {peaks[1]:.1f} MB")
    targets(train, peaks, one_thread)


def compare_training(steps, tail=20):
    """Train dezero (traced) and the torch copy from the same weights on the same batches;
    print their losses and the relative difference of the means of the last `tail`."""
    torch = optional("torch")
    if torch is None:
        sys.exit("--train needs torch, which is not installed")
    weights, data, rng = initial_weights(), corpus(), np.random.default_rng(1)
    ours = dezero.trace(dezero_step(dezero_gpt(weights)))
    theirs = torch_step(torch, torch_gpt(torch, weights))
    losses, seconds = [], [0.0, 0.0]
    for i in range(steps):
        x, t = data.get_batch(BATCH, rng)
        start = time.perf_counter()
        mine = float(ours(x, t).data)
        middle = time.perf_counter()
        their_loss = theirs(torch.from_numpy(x), torch.from_numpy(t)).item()
        seconds[0] += middle - start
        seconds[1] += time.perf_counter() - middle
        losses.append((mine, their_loss))
        if i == 0 or (i + 1) % 100 == 0:
            print(f"  step {i + 1:4d}: dezero {mine:.4f}  torch {their_loss:.4f}", flush=True)
    mine, their_loss = (float(np.mean([pair[k] for pair in losses[-tail:]])) for k in (0, 1))
    difference = abs(mine - their_loss) / their_loss
    print(f"after {steps} steps (dezero {seconds[0]:.0f} s, torch {seconds[1]:.0f} s), mean "
          f"of the last {tail}: dezero traced {mine:.4f}, torch {their_loss:.4f}, relative "
          f"difference {difference:.2%}: within 2%: {verdict(difference <= 0.02)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", choices=("both", "one", "all"), default=_threads_argument(),
                        help="both: one thread, then all threads, each in a fresh process "
                             "(--train: one by default)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--train", type=int, metavar="STEPS",
                        help="compare STEPS training steps against PyTorch instead")
    parser.add_argument("--generation", action="store_true",
                        help="time generation only (no training step, forward or memory)")
    args = parser.parse_args()
    if args.train:
        compare_training(args.train)
    elif args.threads == "both":
        rest = [a for a in sys.argv[1:] if a not in ("--threads", "both")]
        for threads in ("one", "all"):
            subprocess.run([sys.executable, __file__, "--threads", threads, *rest], check=True)
    else:
        bench_all(args)


if __name__ == "__main__":
    main()
