"""The transformer layers and models.GPT: structure, GPT-2's initialisation, errors,
generation, the same model in PyTorch (values, gradients, training), and the traced
training step against eager."""
import warnings

import numpy as np
import pytest
from backend_helpers import assert_replay_equal

import dezero
import dezero.functions as F
import dezero.layers as L
from dezero.models import GPT

CONFIG = dict(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=8)


def _model(dtype=np.float64, seed=0, **changes):
    np.random.seed(seed)
    return GPT(**{**CONFIG, **changes}, dtype=dtype)


def _batch(B=3, T=8, seed=1, vocab=CONFIG["vocab_size"]):
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, (B, T)), rng.integers(0, vocab, (B, T))


# =============================================================================
# Structure and initialisation
# =============================================================================


def test_parameters_are_named_by_block_index_and_counted_as_gpt2():
    model = _model()
    names = [key for key, _ in model._named()]
    assert "blocks/0/attn/qkv/W" in names and "blocks/1/mlp/proj/b" in names
    V, T, C, n = 11, 8, 8, 2
    norms, attn = 2 * 2 * C, (C * 3 * C + 3 * C) + (C * C + C)
    per_block = norms + attn + (C * 4 * C + 4 * C) + (4 * C * C + C)
    expected = V * C + T * C + n * per_block + 2 * C  # the output layer is wte itself
    assert sum(p.data.size for p in model.params()) == expected
    assert f"({expected:,} parameters)" in repr(model).splitlines()[0]
    assert "blocks: LayerList" in repr(model)


def test_initialisation_follows_gpt2():
    np.random.seed(0)
    model = GPT(vocab_size=64, block_size=64, n_layer=8, n_head=4, n_embd=64)
    blocks = list(model.blocks)
    assert len(blocks) == 8 and blocks[3] is model.blocks[3]
    assert model.wte.W.dtype == np.float32
    assert abs(model.wte.W.data.std() - 0.02) < 0.002
    qkv = np.concatenate([b.attn.qkv.W.data.ravel() for b in blocks])
    proj = np.concatenate([b.attn.proj.W.data.ravel() for b in blocks] +
                          [b.mlp.proj.W.data.ravel() for b in blocks])
    assert abs(qkv.std() - 0.02) < 0.001
    assert abs(proj.std() - 0.02 / np.sqrt(16)) < 0.0003
    assert all(not b.attn.qkv.b.data.any() for b in blocks)
    np.testing.assert_array_equal(model.ln_f.gamma.data, np.ones(64))


# =============================================================================
# Bad input
# =============================================================================


def test_heads_that_do_not_divide_n_embd_are_refused():
    with pytest.raises(ValueError, match=r"n_head=3 does not divide n_embd=8"):
        L.MultiHeadAttention(8, 3)


@pytest.mark.parametrize("changes, message", [
    (dict(n_head=0), r"MultiHeadAttention: n_head must be a positive int, got 0"),  # / 0
    (dict(n_head=-2), r"n_head must be a positive int, got -2"),  # divided 8, then reshape
    (dict(n_layer=-1), r"GPT: n_layer must be an int >= 0, got -1"),  # no blocks, silently
    (dict(n_embd=0), r"GPT: n_embd must be an int >= 1, got 0"),
    (dict(vocab_size=11.0), r"GPT: vocab_size must be an int >= 1, got 11.0"),
])
def test_a_configuration_of_no_sense_is_refused_naming_it(changes, message):
    with pytest.raises(ValueError, match=message):
        _model(**changes)


def test_a_model_of_no_blocks_builds_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the residual scale divided by sqrt(0)
        assert _model(n_layer=0)(np.zeros((1, 2), np.int64)).shape == (1, 2, 11)


@pytest.mark.parametrize("ids, message", [
    (np.full((1, 4), 11), r"embed_id"),
    (np.full((1, 4), -1), r"embed_id"),
    (np.zeros((1, 9), np.int64), r"9 tokens is longer than block_size=8"),
    (np.zeros(4, np.int64), r"shape \(B, T\)"),
    (np.zeros((1, 4)), r"must be integers"),
])
def test_bad_ids_name_the_problem(ids, message):
    with pytest.raises((ValueError, IndexError), match=message):
        _model()(ids)


def test_an_input_of_another_width_names_the_layer():
    with pytest.raises(ValueError, match=r"LayerNorm: .* last axis must have size 8"):
        L.LayerNorm(8)(np.zeros((2, 5)))


# =============================================================================
# Generation
# =============================================================================


def test_generate_crops_the_context_and_is_reproducible_with_a_seed():
    model = _model()
    start = np.zeros((2, 3), np.int64)
    out = model.generate(start, 12, rng=5)
    assert out.shape == (2, 15) and out.dtype == np.int64
    np.testing.assert_array_equal(out[:, :3], start)
    assert ((0 <= out) & (out < 11)).all()
    np.testing.assert_array_equal(model.generate(start, 12, rng=5), out)


def test_top_k_of_one_is_the_argmax_of_the_last_logits():
    model = _model()
    ids = np.array([[1, 2, 3]])
    with dezero.no_grad(), dezero.test_mode():
        expected = model(ids).data[:, -1].argmax(-1)
    assert model.generate(ids, 1, top_k=1, rng=0)[0, -1] == expected[0]


def test_generate_refuses_a_temperature_of_zero():
    with pytest.raises(ValueError, match="temperature must be > 0"):
        _model().generate(np.zeros((1, 1), np.int64), 1, temperature=0)


@pytest.mark.parametrize("ids, options, message", [
    (np.zeros((1, 1), np.int64), dict(temperature=float("nan")), r"temperature must be > 0 "
     r"and finite, got nan"),  # sampled token 0 every time
    (np.zeros((1, 1), np.int64), dict(temperature=float("inf")), r"got inf"),
    (np.zeros((1, 1), np.int64), dict(top_k=2.5), r"top_k must be an int in 1..11, got 2.5"),
    (np.zeros(3, np.int64), {}, r"GPT: ids must be integers of shape \(B, T\)"),
    (np.zeros((1, 0), np.int64), {}, r"GPT: ids of shape \(1, 0\) hold no tokens"),
])
def test_generate_names_arguments_it_cannot_sample_from(ids, options, message):
    with pytest.raises(ValueError, match=message):
        _model().generate(ids, 2, **options)


def test_generate_refuses_ids_too_narrow_for_the_tokens_it_appends():
    # uint8 ids took token 299 as 43, in silence.
    model = _model(vocab_size=300)
    with pytest.raises(ValueError, match=r"ids of dtype uint8 cannot hold the tokens up to "
                       r"299 of the vocabulary; widen them"):
        model.generate(np.zeros((1, 2), np.uint8), 1, rng=0)
    assert model.generate(np.zeros((1, 2), np.uint16), 1, rng=0).dtype == np.uint16


def test_a_tiny_temperature_samples_the_likeliest_token():
    # logits / 1e-320 overflowed to inf, and inf - inf gave NaN probabilities.
    model = _model()
    ids = np.array([[1, 2, 3]])
    greedy = model.generate(ids, 3, top_k=1, rng=0)
    np.testing.assert_array_equal(model.generate(ids, 3, temperature=1e-320, rng=0), greedy)
    np.testing.assert_array_equal(model.generate(ids, 3, rng=np.int64(7)),
                                  model.generate(ids, 3, rng=7))  # a numpy int seeds too


# =============================================================================
# The same model in PyTorch
# =============================================================================


def _torch_gpt(torch, model):
    """The forward pass of `model` written in torch ops, on tensors of its weights."""
    nn = torch.nn.functional
    W = {key: torch.tensor(p.data, requires_grad=True) for key, p in model._named()}

    def forward(ids):
        B, T = ids.shape
        x = W["wte/W"][torch.tensor(ids)] + W["wpe/W"][:T]
        for i in range(len(model.blocks)):
            p = f"blocks/{i}/"
            h = nn.layer_norm(x, (x.shape[-1],), W[p + "ln1/gamma"], W[p + "ln1/beta"])
            q, k, v = (h @ W[p + "attn/qkv/W"] + W[p + "attn/qkv/b"]).split(x.shape[-1], -1)
            H = model.blocks[i].attn.n_head
            q, k, v = (t.reshape(B, T, H, -1).transpose(1, 2) for t in (q, k, v))
            a = nn.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(B, T, -1)
            x = x + a @ W[p + "attn/proj/W"] + W[p + "attn/proj/b"]
            h = nn.layer_norm(x, (x.shape[-1],), W[p + "ln2/gamma"], W[p + "ln2/beta"])
            h = nn.gelu(h @ W[p + "mlp/fc/W"] + W[p + "mlp/fc/b"], approximate="tanh")
            x = x + h @ W[p + "mlp/proj/W"] + W[p + "mlp/proj/b"]
        x = nn.layer_norm(x, (x.shape[-1],), W["ln_f/gamma"], W["ln_f/beta"])
        return x @ W["wte/W"].T

    return W, forward


def test_logits_and_gradients_equal_pytorch(torch):
    model = _model(np.float64)
    x, t = _batch()
    W, torch_forward = _torch_gpt(torch, model)
    logits = model(x)
    loss = F.softmax_cross_entropy(logits, t)
    loss.backward()
    theirs = torch_forward(x)
    their_loss = torch.nn.functional.cross_entropy(theirs.reshape(-1, 11),
                                                   torch.tensor(t).reshape(-1))
    their_loss.backward()
    np.testing.assert_allclose(logits.data, theirs.detach().numpy(), rtol=1e-10, atol=1e-12)
    assert abs(float(loss.data) - their_loss.item()) < 1e-12
    for key, p in model._named():
        np.testing.assert_allclose(p.grad.data, W[key].grad.numpy(), rtol=1e-8, atol=1e-12,
                                   err_msg=key)


def test_twenty_adamw_steps_follow_pytorch_in_float32(torch):
    model = _model(np.float32)
    W, torch_forward = _torch_gpt(torch, model)
    optimizer = dezero.optimizers.AdamW(alpha=3e-3, weight_decay=0.1).setup(model)
    decayed = [W[key] for key, p in model._named() if p.ndim >= 2]
    others = [W[key] for key, p in model._named() if p.ndim < 2]
    their_optimizer = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                                         {"params": others, "weight_decay": 0.0}], lr=3e-3)
    for step in range(20):
        x, t = _batch(4, 8, seed=step)
        loss = F.softmax_cross_entropy(model(x), t)
        model.cleargrads()
        loss.backward()
        optimizer.update()
        their_optimizer.zero_grad()
        theirs = torch.nn.functional.cross_entropy(torch_forward(x).reshape(-1, 11),
                                                   torch.tensor(t).reshape(-1))
        theirs.backward()
        their_optimizer.step()
        assert abs(float(loss.data) - theirs.item()) < 1e-4 * max(1.0, theirs.item()), step


# =============================================================================
# Trace mode
# =============================================================================


def test_the_traced_training_step_equals_eager():
    def run(traced):
        model = _model(np.float64, seed=3)
        optimizer = dezero.optimizers.AdamW(alpha=1e-2).setup(model)

        def step(x, t):
            loss = F.softmax_cross_entropy(model(x), t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            return loss

        step = dezero.trace(step) if traced else step
        losses = [float(step(*_batch(2, 8, seed=i)).data) for i in range(4)]
        return losses, [p.data.copy() for p in model.params()], step

    (eager, eager_params, _), (traced, traced_params, step) = run(False), run(True)
    assert step.graph is not None and "blocks.0.attn.qkv.W" in str(step.graph)
    assert_replay_equal(traced, eager)  # bit-exact on the python backend
    for mine, theirs in zip(traced_params, eager_params):
        assert_replay_equal(mine, theirs)


def test_a_float32_model_trains_in_float32():
    # The causal mask's fill value met float32 scores as a Python float, which
    # numpy 1.x widened to float64: logits, and then the weights AdamW wrote, were
    # float64 (tests/ run under numpy<2 too).
    model = _model(np.float32)
    optimizer = dezero.optimizers.AdamW().setup(model)
    x, t = _batch(2, 5)
    logits = model(x)
    F.softmax_cross_entropy(logits, t).backward()
    optimizer.update()
    assert logits.dtype == np.float32
    assert {p.dtype for p in model.params()} == {np.dtype(np.float32)}
