"""Attention and the transformer layers from Python, as a PyTorch user writes them, against
PyTorch's float64 values (the fixture of scripts/export_torch_attention.py)."""

import copy

import numpy as np
import pytest
from conftest import REPO

import ferrograd as fg
import ferrograd.nn as nn
import ferrograd.nn.functional as F

REF = fg.load(REPO / "crates" / "ferrograd" / "tests" / "fixtures" / "torch_attention.safetensors")


def wave(shape, a, b=0.0, f=np.sin):
    return f(a * np.arange(int(np.prod(shape))) + b).reshape(shape)


def close(got, key, tol=1e-12):
    np.testing.assert_allclose(np.asarray(got), REF[key].numpy(), rtol=tol, atol=tol)


def state(prefix):
    head = f"{prefix}.state."
    return {k[len(head) :]: v for k, v in REF.items() if k.startswith(head)}


def in_f64(layer):
    """A layer whose parameters are float64, for PyTorch's float64 state dict."""
    return layer.double()


def test_scaled_dot_product_attention_and_its_gradients():
    q = fg.tensor(wave((2, 3, 4, 5), 0.3), requires_grad=True)
    k = fg.tensor(wave((2, 3, 6, 5), 0.2, f=np.cos), requires_grad=True)
    v = fg.tensor(wave((2, 3, 6, 7), 0.7, 1.0), requires_grad=True)
    mask = fg.tensor(wave((4, 6), 0.1, f=np.cos), requires_grad=True)
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
    close(y.numpy(), "masked.out")
    (y * fg.tensor(wave((2, 3, 4, 7), 0.13, 0.5))).sum().backward()
    for name, t in (("q", q), ("k", k), ("v", v), ("mask", mask)):
        close(t.grad.numpy(), f"masked.grad_{name}")
    causal = fg.scaled_dot_product_attention(q, k[:, :, :4], v[:, :, :4], is_causal=True)
    close(causal.numpy(), "causal.out")
    allowed = np.tril(np.ones((4, 4), dtype=bool))  # True: the key takes part, as PyTorch's
    as_mask = F.scaled_dot_product_attention(q, k[:, :, :4], v[:, :, :4], attn_mask=allowed)
    np.testing.assert_allclose(as_mask.numpy(), causal.numpy(), rtol=1e-14)


def test_attention_dropout_drops_weights_as_pytorchs_dropout_p():
    # Identity values make the output the weights: each one kept and scaled by 1 / (1 - p),
    # or zeroed; the generator manual_seed sets fixes which.
    q = fg.tensor(wave((2, 40, 8), 0.3))
    k = fg.tensor(wave((2, 60, 8), 0.2, f=np.cos))
    eye = fg.tensor(np.broadcast_to(np.eye(60), (2, 60, 60)).copy())
    full = F.scaled_dot_product_attention(q, k, eye).numpy()
    fg.manual_seed(0)
    dropped = F.scaled_dot_product_attention(q, k, eye, dropout_p=0.25).numpy()
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], full[kept] / 0.75, rtol=1e-12)
    assert abs(1 - kept.mean() - 0.25) < 0.03
    fg.manual_seed(0)
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, k, eye, dropout_p=0.25).numpy(), dropped)
    assert not np.array_equal(F.scaled_dot_product_attention(q, k, eye, dropout_p=0.25).numpy(), dropped)
    with pytest.raises(ValueError, match="dropout"):
        F.scaled_dot_product_attention(q, k, eye, dropout_p=1.5)


def test_multihead_attention_loads_pytorchs_weights():
    mha = in_f64(nn.MultiheadAttention(8, 2, batch_first=True))
    assert sorted(n for n, _ in mha.named_parameters()) == sorted(state("mha"))
    mha.load_state_dict(state("mha"))
    x = fg.tensor(wave((2, 5, 8), 0.37))
    hidden = np.triu(np.ones((5, 5), dtype=bool), 1)  # True: hidden, as MultiheadAttention's
    y, w = mha(x, x, x, attn_mask=hidden)
    close(y.numpy(), "mha.out")
    close(w.numpy(), "mha.weights")
    y, none = mha(x, x, x, need_weights=False, attn_mask=hidden)
    assert none is None
    close(y.numpy(), "mha.out")
    padded = np.zeros((2, 5), dtype=bool)
    padded[1, 3:] = True
    y, w = mha(x, x, x, key_padding_mask=padded)
    assert np.abs(w.numpy()[1, :, 3:]).max() == 0.0 and np.abs(w.numpy()[0, :, 3:]).max() > 0


@pytest.mark.parametrize("name,kwargs", [("post_relu", {}), ("pre_gelu", {"norm_first": True, "activation": "gelu"})])
def test_transformer_encoder_layer_loads_pytorchs_weights(name, kwargs):
    layer = in_f64(nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, **kwargs))
    layer.load_state_dict(state(name))
    layer.eval()
    x = fg.tensor(wave((2, 5, 8), 0.37))
    close(layer(x).numpy(), f"{name}.out")
    hidden = np.triu(np.ones((5, 5), dtype=bool), 1)
    close(layer(x, src_mask=hidden, is_causal=True).numpy(), f"{name}.out_causal")
    close(layer(x, is_causal=True).numpy(), f"{name}.out_causal")


@pytest.mark.parametrize("name,bias", [("mha_kv", True), ("mha_nobias", False)])
def test_multihead_attention_of_other_key_widths_masks_and_unbatched_inputs(name, bias):
    mha = in_f64(nn.MultiheadAttention(8, 2, bias=bias, kdim=6, vdim=3, batch_first=True))
    assert sorted(n for n, _ in mha.named_parameters()) == sorted(state(name))
    mha.load_state_dict(state(name))
    x = fg.tensor(wave((2, 5, 8), 0.37))
    key, value = fg.tensor(wave((2, 4, 6), 0.23, f=np.cos)), fg.tensor(wave((2, 4, 3), 0.41, 0.3))
    per_head = wave((4, 5, 4), 0.17, f=np.cos)  # [N*H, L, S], PyTorch's 3-D form
    padded = np.array([[False, False, True, False], [False, False, False, True]])
    y, w = mha(x, key, value, attn_mask=per_head, key_padding_mask=padded, average_attn_weights=False)
    close(y, f"{name}.out")
    close(w, f"{name}.weights")
    # The first sample unbatched: [L, E] in and out, masks [H, L, S] and [S].
    y1, w1 = mha(x[0], key[0], value[0], attn_mask=per_head[:2], key_padding_mask=padded[0])
    assert y1.shape == (5, 8) and w1.shape == (5, 4)
    np.testing.assert_allclose(y1.numpy(), REF[f"{name}.out"].numpy()[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(w1.numpy(), REF[f"{name}.weights"].numpy()[0].mean(0), rtol=1e-12, atol=1e-12)
    # Sequence first (PyTorch's default layout), unbatched the same.
    seq = in_f64(nn.MultiheadAttention(8, 2, bias=bias, kdim=6, vdim=3))
    seq.load_state_dict(state(name))
    ys, _ = seq(
        x.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1), attn_mask=per_head, key_padding_mask=padded
    )
    close(ys.transpose(0, 1), f"{name}.out")
    with pytest.raises(ValueError, match=r"attn_mask must be \[L, S\] or \[4, L, S\]"):
        mha(x, key, value, attn_mask=per_head[:3])
    with pytest.raises(ValueError, match=r"key_padding_mask must be \[2, S\]"):
        mha(x, key, value, key_padding_mask=padded[0])
    with pytest.raises(NotImplementedError, match="add_bias_kv"):
        nn.MultiheadAttention(8, 2, add_bias_kv=True)


def test_an_encoder_layer_without_bias_with_its_eps_and_a_callable_activation():
    layer = in_f64(
        nn.TransformerEncoderLayer(
            8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, activation=fg.tanh, layer_norm_eps=1e-3, bias=False
        )
    )
    assert sorted(n for n, _ in layer.named_parameters()) == sorted(state("enc_custom"))
    layer.load_state_dict(state("enc_custom"))
    layer.eval()
    x = fg.tensor(wave((2, 5, 8), 0.37))
    close(layer(x), "enc_custom.out")
    np.testing.assert_allclose(layer(x[1]).numpy(), REF["enc_custom.out"].numpy()[1], rtol=1e-12, atol=1e-12)
    twin = copy.deepcopy(layer)
    close(twin(x), "enc_custom.out")
    # F.relu and F.gelu are the core's own; a module or lambda is called as it is.
    calls = []

    def relu_counted(h):
        calls.append(h.shape)
        return F.relu(h)

    fg.manual_seed(3)
    builtin = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation=F.relu)
    fg.manual_seed(3)
    counted = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, activation=relu_counted)
    xf = fg.tensor(wave((5, 2, 8), 0.37).astype(np.float32), requires_grad=True)
    assert np.array_equal(builtin(xf).numpy(), counted(xf).numpy()) and calls == [(5, 2, 16)]
    counted(xf).sum().backward()
    assert xf.grad is not None and np.abs(xf.grad.numpy()).max() > 0

    def broken(h):
        raise KeyError("from the activation")

    with pytest.raises(KeyError, match="from the activation"):
        nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, activation=broken)(xf)
    with pytest.raises(TypeError, match="callable"):
        nn.TransformerEncoderLayer(8, 2, activation=3)


def test_embedding_padding_row_and_layer_norm_without_bias():
    emb = nn.Embedding(6, 4, padding_idx=-1)
    assert repr(emb) == "Embedding(6, 4, padding_idx=5)"  # the row, as PyTorch prints it
    assert np.abs(emb.weight.detach().numpy()[5]).max() == 0.0
    ids = fg.tensor(np.array([[5, 1], [5, 2]]))
    (emb(ids) ** 2).sum().backward()
    grad = emb.weight.grad.numpy()
    assert np.abs(grad[5]).max() == 0.0 and np.abs(grad[1]).max() > 0
    with pytest.raises(ValueError, match="padding_idx 6"):
        nn.Embedding(6, 4, padding_idx=6)
    norm = nn.LayerNorm(4, bias=False)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]
    x = np.arange(8.0).reshape(2, 4)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(norm(fg.tensor(x)).numpy(), want, rtol=1e-6)


def test_rms_norm():
    x = fg.tensor(wave((2, 5, 8), 0.37))
    norm = in_f64(nn.RMSNorm(8))
    norm.weight.data = wave((8,), 0.9, 1.0)
    close(norm(x).numpy(), "rms.out")
    close(F.rms_norm(x, 8, weight=fg.tensor(wave((8,), 0.9, 1.0))).numpy(), "rms.out")


def test_a_transformer_layer_trains():
    fg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, norm_first=True)
    head = nn.Linear(8, 1)
    opt = fg.optim.AdamW(list(layer.parameters()) + list(head.parameters()), lr=1e-2)
    x = fg.tensor(wave((4, 6, 8), 0.21).astype(np.float32))
    target = fg.tensor(wave((4, 6, 1), 0.5).astype(np.float32))
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = F.mse_loss(head(layer(x, is_causal=True)), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0], losses[::10]


def test_the_pieces_of_sampling_text():
    logits = fg.tensor([[0.5, 3.0, -1.0, 3.0, 2.0]])
    values, indices = logits.topk(3)
    assert values.tolist() == [[3.0, 3.0, 2.0]] and indices.tolist() == [[1, 3, 4]]
    kth = values[:, -1:]
    cut = logits.masked_fill(logits < kth, float("-inf"))
    assert cut.tolist()[0][2] == float("-inf") and cut.tolist()[0][1] == 3.0
    probs = F.softmax(cut, dim=-1)
    fg.manual_seed(0)
    draws = fg.multinomial(probs.expand(1000, 5), 1)
    assert draws.shape == (1000, 1) and set(np.unique(draws.numpy())) <= {1, 3, 4}
    fg.manual_seed(0)
    assert fg.multinomial(probs.expand(1000, 5), 1).tolist() == draws.tolist()
    ones = fg.ones(3, 3)
    assert ones.tril().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    assert fg.triu(ones, 1).tolist() == [[0, 1, 1], [0, 0, 1], [0, 0, 0]]


def test_pytorchs_mask_idioms_and_layouts():
    q = fg.tensor(wave((1, 2, 4, 3), 0.3))
    causal = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    allowed = fg.ones(4, 4, dtype=fg.bool).tril()  # PyTorch's idiom: a bool mask, True takes part
    assert allowed.dtype == fg.bool
    np.testing.assert_allclose(F.scaled_dot_product_attention(q, q, q, attn_mask=allowed).numpy(), causal.numpy())
    additive = fg.full((4, 4), float("-inf"), dtype=fg.float64).triu(1)  # no NaN below it
    assert not np.isnan(additive.numpy()).any()
    np.testing.assert_allclose(F.scaled_dot_product_attention(q, q, q, attn_mask=additive).numpy(), causal.numpy())
    m = fg.tensor([5, 0]).bool()
    assert (~m).tolist() == [False, True] and m.sum().item() == 1
    # batch_first=False (PyTorch's default): [T, N, E] in and out.
    fg.manual_seed(0)
    a = nn.MultiheadAttention(8, 2)
    b = nn.MultiheadAttention(8, 2, batch_first=True)
    b.load_state_dict(a.state_dict())
    x = fg.tensor(wave((2, 5, 8), 0.37).astype(np.float32))
    y_first, _ = b(x, x, x)
    xt = x.transpose(0, 1)
    y_seq, _ = a(xt, xt, xt)
    np.testing.assert_allclose(y_seq.transpose(0, 1).numpy(), y_first.numpy(), rtol=1e-6)
    padded = np.zeros((2, 5), dtype=bool)
    padded[0, 4] = True
    y, w = b(x, x, x, key_padding_mask=padded, is_causal=True)  # causal beside padding
    assert np.abs(np.triu(w.numpy()[1], 1)).max() == 0.0 and np.abs(w.numpy()[0, :, 4]).max() == 0.0


def test_the_gpt_example_trains_and_samples(tmp_path, capsys):
    """examples/gpt.py, the PyTorch GPT with `fg` for `torch`, on a short text: the loss falls
    from about ln(vocabulary) and it writes a sample."""
    import importlib.util
    import pathlib

    script = pathlib.Path(__file__).resolve().parents[1] / "examples" / "gpt.py"
    spec = importlib.util.spec_from_file_location("gpt_example", script)
    gpt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpt)
    text = tmp_path / "text.txt"
    text.write_text("Shall I compare thee to a summer's day?\nThou art more lovely.\n" * 30)
    args = [
        "--text",
        str(text),
        "--iters",
        "30",
        "--eval-interval",
        "15",
        "--eval-iters",
        "3",
        "--batch",
        "4",
        "--context",
        "16",
        "--width",
        "32",
        "--heads",
        "2",
        "--layers",
        "2",
        "--sample",
        "40",
    ]
    losses = gpt.main(args)
    out = capsys.readouterr().out
    vocab = len(set(text.read_text()))
    first = float(out.split("iter 0: train loss ")[1].split(",")[0])
    assert abs(first - np.log(vocab)) < 0.3
    assert losses["train"] < first - 0.1 and np.isfinite(losses["val"])
    assert "ms per iteration" in out and "sample:\n" in out


def test_split_chunk_arange_and_a_linear_without_bias():
    x = fg.arange(10).reshape(2, 5)
    parts = x.split(2, dim=1)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(2, 2), (2, 2), (2, 1)]
    assert [p.shape for p in x.chunk(4, 1)] == [(2, 2), (2, 2), (2, 1)]
    assert [p.shape for p in x.split([1, 4], 1)] == [(2, 1), (2, 4)]
    assert parts[2].tolist() == [[4], [9]]
    empty = fg.zeros(0)
    assert len(empty.split(2)) == 1 and len(empty.chunk(3)) == 3
    with pytest.raises(ValueError):
        x.split(-1, 1)
    with pytest.raises(ValueError):
        x.split([1, 1], 1)
    # arange as PyTorch's: integers (numpy's too) give int64, a float gives float32.
    assert fg.arange(5).dtype == fg.int64 and fg.arange(np.int64(3)).dtype == fg.int64
    assert fg.arange(2.5).dtype == fg.float32 and fg.arange(0, 1, 0.5).dtype == fg.float32
    lin = nn.Linear(3, 2, bias=False)
    assert lin.bias is None and [n for n, _ in lin.named_parameters()] == ["weight"]
    assert lin(fg.ones(4, 3)).shape == (4, 2)
    w = fg.tensor([3.0, 4.0], requires_grad=True)
    (w * w).sum().backward()
    assert abs(float(nn.utils.clip_grad_norm_([w], 1.0)) - 10.0) < 1e-5
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_weight_tying_by_assignment_shares_one_parameter():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.tok.weight  # as nanoGPT ties them

        def forward(self, idx):
            return self.head(self.tok(idx))

    m = Tied()
    assert m.head.weight is m.tok.weight
    assert [n for n, _ in m.named_parameters()] == ["tok.weight"]
    opt = fg.optim.AdamW(m.parameters(), lr=0.1)
    idx = fg.tensor(np.array([1, 2, 3]))
    F.cross_entropy(m(idx), fg.tensor(np.array([3, 2, 1]))).backward()
    # Both uses of the table reach its one gradient: the lookup's rows and the head's product.
    table, g = m.tok.weight.numpy().copy(), m.tok.weight.grad.numpy()
    assert np.count_nonzero(np.abs(g).sum(axis=1)) == 10
    opt.step()
    assert not np.array_equal(m.tok.weight.numpy(), table)
    np.testing.assert_array_equal(m.head.weight.numpy(), m.tok.weight.numpy())
    # Only a parameter of the same axes and dtype; another size is taken, as PyTorch takes
    # it (a head for 11 classes).
    with pytest.raises(TypeError, match="parameter"):
        m.head.weight = fg.tensor(np.zeros((10, 4), np.float32))
    with pytest.raises(ValueError, match="cannot take a \\[10, 4\\] f64"):
        m.head.weight = nn.Embedding(10, 4).double().weight
    with pytest.raises(ValueError, match="cannot take a \\[4\\]"):
        m.head.weight = nn.Parameter(fg.zeros(4))
    m.head.weight = nn.Embedding(11, 4).weight
    assert tuple(m(idx).shape) == (3, 11)
    with pytest.raises(AttributeError):
        m.head.foo = 3


def test_a_query_hidden_from_every_key_is_zero_and_passes_no_gradient():
    # PyTorch (2.5 and later) gives such a row 0 and every gradient finite, for boolean and
    # float masks alike; a softmax's 0/0 made the row NaN and every key's gradient with it.
    rng = np.random.default_rng(0)
    q, k, v = (fg.tensor(rng.standard_normal((1, 2, 3, 4)), requires_grad=True) for _ in range(3))
    keep = np.array([[True] * 3, [False] * 3, [True, False, True]])
    add = np.where(keep, 0.0, -np.inf)
    for mask in (fg.tensor(keep), fg.tensor(add)):
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert np.all(y.numpy()[:, :, 1] == 0.0)
        (y * fg.tensor(rng.standard_normal(y.shape))).sum().backward()
        for t in (q, k, v):
            assert np.isfinite(t.grad.numpy()).all()
        assert np.all(q.grad.numpy()[:, :, 1] == 0.0)
        q.grad = k.grad = v.grad = None
    # A sample padded everywhere, in training: finite, as in PyTorch.
    fg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True)
    x = fg.randn(2, 3, 8, requires_grad=True)
    pad = fg.tensor(np.array([[False, False, True], [True, True, True]]))
    out = layer(x, src_key_padding_mask=pad)
    out.sum().backward()
    assert np.isfinite(out.numpy()).all() and np.isfinite(x.grad.numpy()).all()


def test_attention_masks_of_integers_are_refused_and_no_width_is_the_mean_of_the_values():
    q = fg.randn(1, 2, 4)
    with pytest.raises(TypeError, match="boolean .* or float"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=fg.tensor([[1, 0], [1, 1]]))
    v = fg.tensor(np.arange(6.0).reshape(1, 3, 2))
    empty = fg.zeros(1, 2, 0, dtype=fg.float64)
    y = F.scaled_dot_product_attention(empty, fg.zeros(1, 3, 0, dtype=fg.float64), v)
    np.testing.assert_allclose(y.numpy(), np.broadcast_to(v.numpy().mean(1, keepdims=True), (1, 2, 2)))


def test_cross_entropy_with_minus_infinity_logits_ignored_rows_and_weights():
    x = np.array([[0.0, -np.inf, 1.0], [0.5, 0.2, 0.1], [-np.inf, 2.0, 0.0]])
    t = np.array([0, 2, 1])

    def nll_rows(x, t):
        top = x.max(1, keepdims=True)
        logp = x - top - np.log(np.exp(x - top).sum(1, keepdims=True))
        return -logp[np.arange(len(t)), t], logp

    per, logp = nll_rows(x, t)
    w = np.array([0.5, 2.0, 1.0])
    cases = [
        ({}, per.mean()),
        ({"weight": fg.tensor(w)}, (per * w[t]).sum() / w[t].sum()),
        ({"ignore_index": 2}, per[[0, 2]].mean()),
        ({"reduction": "none"}, per),
    ]
    for kwargs, want in cases:
        logits = fg.tensor(x, requires_grad=True)
        loss = F.cross_entropy(logits, fg.tensor(t), **kwargs)
        np.testing.assert_allclose(loss.numpy(), want, rtol=1e-12)
        loss.sum().backward()
        assert np.isfinite(logits.grad.numpy()).all(), kwargs
    # Label smoothing reads every class of a row that counts: −∞ there makes it infinite (as
    # in PyTorch), but a row left out stays out.
    smooth = F.cross_entropy(fg.tensor(x[1:2]), fg.tensor(t[1:2]), label_smoothing=0.1)
    want = 0.9 * per[1] - 0.1 * logp[1].mean()
    np.testing.assert_allclose(smooth.numpy(), want, rtol=1e-12)
    kept = F.cross_entropy(fg.tensor(x), fg.tensor(np.array([-100, 2, -100])), label_smoothing=0.1)
    np.testing.assert_allclose(kept.numpy(), want, rtol=1e-12)
    # Every row left out: NaN (PyTorch's 0/0), gradients 0 rather than NaN, on both paths.
    for kwargs in ({}, {"weight": fg.tensor(w)}, {"label_smoothing": 0.1}):
        logits = fg.tensor(x, requires_grad=True)
        loss = F.cross_entropy(logits, fg.tensor(np.full(3, -100)), **kwargs)
        assert np.isnan(loss.item())
        loss.backward()
        assert np.all(logits.grad.numpy() == 0.0), kwargs


def test_embedding_padding_index_passes_no_gradient_and_indices_are_integers():
    w = fg.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    idx = fg.tensor(np.array([[0, 2, 2], [1, 2, 3]]))
    out = F.embedding(idx, w, padding_idx=2)
    np.testing.assert_array_equal(out.numpy(), np.arange(12.0).reshape(4, 3)[idx.numpy()])
    out.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy().sum(1), [3.0, 3.0, 0.0, 3.0])
    w.grad = None
    F.embedding(idx, w, padding_idx=-1).sum().backward()  # row 3
    np.testing.assert_array_equal(w.grad.numpy().sum(1), [3.0, 3.0, 9.0, 0.0])
    with pytest.raises(TypeError, match="integers"):
        F.embedding(fg.tensor([1.7]), w)
    with pytest.raises(ValueError, match="padding_idx"):
        F.embedding(idx, w, padding_idx=4)
    with pytest.raises(TypeError):
        F.embedding(idx, w, padding_idx=1.5)


def test_a_parameter_in_two_groups_is_refused():
    p, q = fg.tensor([1.0], requires_grad=True), fg.tensor([2.0], requires_grad=True)
    with pytest.raises(ValueError, match="more than one parameter group"):
        fg.optim.SGD([{"params": [p]}, {"params": [p, q]}], lr=0.1)
    # Twice in one group: a warning, as PyTorch's (whose optimizers then step it twice; here
    # it is stepped once).
    with pytest.warns(UserWarning, match="more than once"):
        twice = fg.optim.SGD([q, q], lr=0.1)
    q.grad = fg.tensor([1.0])
    twice.step()
    assert q.tolist() == pytest.approx([1.9])
    opt = fg.optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [p]})
    assert len(opt.param_groups) == 1
    p.grad = fg.tensor([1.0])
    opt.step()
    assert p.tolist() == pytest.approx([0.9])
    opt.add_param_group({"params": [q]})
    assert len(opt.param_groups) == 2


def test_clip_grad_norm_returns_the_gradients_dtype_and_counts_for_order_zero():
    p = fg.tensor(np.array([3.0, 0.0, 4.0]), requires_grad=True)
    p.grad = fg.tensor(np.array([3.0, 0.0, 4.0]))
    norm = nn.utils.clip_grad_norm_([p], 10.0)
    assert norm.dtype == fg.float64 and norm.item() == 5.0
    assert nn.utils.clip_grad_norm_([p], 10.0, norm_type=0).item() == 2.0
    assert nn.utils.clip_grad_norm_([p], 10.0, norm_type=-float("inf")).item() == 0.0


def test_topk_as_pytorchs_smallest_along_any_axis_and_named():
    x = fg.tensor(np.array([[0.5, 3.0, -1.0], [3.0, 2.0, np.nan]]))
    top = x.topk(2)
    np.testing.assert_array_equal(top.values.numpy(), [[3.0, 0.5], [np.nan, 3.0]])
    np.testing.assert_array_equal(top.indices.numpy(), [[1, 0], [2, 0]])
    values, indices = fg.topk(x, 1, dim=0, largest=False)
    np.testing.assert_array_equal(values.numpy(), [[0.5, 2.0, -1.0]])
    np.testing.assert_array_equal(indices.numpy(), [[0, 1, 0]])
    low = x.topk(2, largest=False, sorted=False)
    np.testing.assert_array_equal(low.values.numpy(), [[-1.0, 0.5], [2.0, 3.0]])
    w = fg.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    w.topk(1, dim=0).values.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [[0, 0, 0], [1, 1, 1]])
    with pytest.raises(ValueError, match="axis"):
        x.topk(1, dim=2)
    import pickle

    # PyTorch's torch.return_types.topk: a named tuple type that lives in a module.
    assert type(top) is fg.return_types.topk
    assert pickle.loads(pickle.dumps(type(top))) is fg.return_types.topk
    one = fg.tensor(2.5).topk(1)
    assert one.values.item() == 2.5 and one.indices.item() == 0 and one.values.shape == ()


def test_multihead_attention_gives_each_heads_weights():
    fg.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = fg.randn(3, 5, 8)
    y, heads = mha(x, x, x, average_attn_weights=False)
    y2, mean = mha(x, x, x)
    assert tuple(heads.shape) == (3, 2, 5, 5)
    np.testing.assert_allclose(heads.numpy().mean(1), mean.numpy(), rtol=1e-6)
    np.testing.assert_array_equal(y.numpy(), y2.numpy())
    np.testing.assert_allclose(heads.numpy().sum(-1), 1.0, rtol=1e-5)


def test_transformer_encoder_stacks_copies_of_a_layer_as_pytorchs():
    import copy

    fg.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, norm_first=True)
    enc = nn.TransformerEncoder(layer, num_layers=2, norm=nn.LayerNorm(8))
    keys = list(enc.state_dict())
    assert "layers.0.self_attn.in_proj_weight" in keys and "layers.1.linear2.bias" in keys
    assert "norm.weight" in keys and len(keys) == 2 * len(layer.state_dict()) + 2
    sd = layer.state_dict()
    for k, v in enc.layers[1].state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k].numpy())
    x = fg.randn(2, 5, 8)
    mask = fg.tensor(np.triu(np.full((5, 5), -np.inf), 1))
    want = enc.norm(enc.layers[1](enc.layers[0](x, src_mask=mask), src_mask=mask))
    np.testing.assert_array_equal(enc(x, mask=mask).numpy(), want.numpy())
    causal = enc(x, is_causal=True)
    np.testing.assert_allclose(causal.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    # Parameters of their own: a step on the copies leaves the original alone, and the two
    # copies (with different gradients) apart.
    opt = fg.optim.SGD(enc.parameters(), lr=0.1)
    enc(x).sum().backward()
    opt.step()
    w0, w1 = (enc.layers[i].state_dict()["linear1.weight"].numpy() for i in (0, 1))
    assert not np.array_equal(w0, sd["linear1.weight"].numpy()) and not np.array_equal(w0, w1)
    np.testing.assert_array_equal(layer.state_dict()["linear1.weight"].numpy(), sd["linear1.weight"].numpy())
    # A copy keeps the dtype and the mode, and draws its own dropout.
    drop = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.5, batch_first=True).double()
    drop.eval()
    twin = copy.deepcopy(drop)
    assert not twin.training and twin.state_dict()["linear1.weight"].dtype == fg.float64
    twin.train()
    a, b = copy.deepcopy(twin), copy.deepcopy(twin)
    xd = fg.randn(1, 4, 8, dtype=fg.float64)
    assert not np.array_equal(a(xd).numpy(), b(xd).numpy())


@pytest.mark.parametrize("name,kwargs", [("dec_post", {}), ("dec_pre", {"norm_first": True, "activation": "gelu"})])
def test_transformer_decoder_layer_loads_pytorchs_weights(name, kwargs):
    layer = in_f64(nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, **kwargs))
    assert sorted(layer.state_dict()) == sorted(state(name))
    layer.load_state_dict(state(name))
    layer.eval()
    x, memory = fg.tensor(wave((2, 5, 8), 0.37)), fg.tensor(wave((2, 4, 8), 0.29, 0.5, f=np.cos))
    close(layer(x, memory).numpy(), f"{name}.out")
    hidden = np.triu(np.ones((5, 5), dtype=bool), 1)
    padded = np.array([[False, False, False, True], [False, True, False, False]])
    close(
        layer(x, memory, tgt_mask=hidden, tgt_is_causal=True, memory_key_padding_mask=padded).numpy(),
        f"{name}.out_masked",
    )
    close(layer(x, memory, tgt_is_causal=True, memory_key_padding_mask=padded).numpy(), f"{name}.out_masked")
    # PyTorch's default layout [T, N, E]: the same values, transposed.
    seq = in_f64(nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, **kwargs))
    seq.load_state_dict(state(name))
    seq.eval()
    y = seq(x.transpose(0, 1), memory.transpose(0, 1)).transpose(0, 1)
    close(y.numpy(), f"{name}.out")


def test_transformer_loads_pytorchs_weights_and_trains():
    fg.manual_seed(0)
    model = nn.Transformer(
        d_model=8,
        nhead=2,
        num_encoder_layers=2,
        num_decoder_layers=1,
        dim_feedforward=16,
        dropout=0.0,
        batch_first=True,
    ).double()
    assert sorted(model.state_dict()) == sorted(state("transformer"))
    # Every matrix drawn from Xavier's uniform distribution, as PyTorch's: within ±√(6/(in+out)).
    w = model.state_dict()["encoder.layers.0.linear1.weight"].numpy()
    assert np.abs(w).max() <= np.sqrt(6 / (8 + 16)) and np.abs(w).max() > 0.5 * np.sqrt(6 / (8 + 16))
    model.load_state_dict(state("transformer"))
    model.eval()
    src, tgt = fg.tensor(wave((2, 4, 8), 0.31, 0.2)), fg.tensor(wave((2, 5, 8), 0.37))
    mask = nn.Transformer.generate_square_subsequent_mask(5, dtype=fg.float64)
    assert mask.shape == (5, 5) and mask.numpy()[0, 1] == -np.inf and mask.numpy()[1, 0] == 0
    close(model(src, tgt, tgt_mask=mask).numpy(), "transformer.out")
    close(model(src, tgt, tgt_is_causal=True).numpy(), "transformer.out")
    with pytest.raises(RuntimeError, match="batch number of src and tgt"):
        model(src, tgt[:1])
    # Trains: a few steps on a copy task lower the loss; a stack's layers have parameters
    # of their own.
    model.train()
    opt = fg.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(20):
        opt.zero_grad()
        loss = ((model(src, tgt, tgt_mask=mask) - tgt) ** 2).mean()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    assert loss.item() < 0.5 * first
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16, 0.0, batch_first=True), num_layers=2)
    keys = list(dec.state_dict())
    assert "layers.1.multihead_attn.out_proj.weight" in keys and "norm.weight" not in keys
    assert dec.layers[0].linear1.weight is not dec.layers[1].linear1.weight
    y = dec(tgt.float(), src.float(), tgt_is_causal=True)
    assert y.shape == (2, 5, 8) and np.isfinite(y.numpy()).all()
    copied = copy.deepcopy(dec)
    np.testing.assert_array_equal(copied(tgt.float(), src.float()).numpy(), dec(tgt.float(), src.float()).numpy())
    with pytest.raises(ValueError, match="relu/gelu"):
        nn.TransformerDecoderLayer(8, 2, activation="tanh")
