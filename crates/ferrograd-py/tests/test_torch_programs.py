"""Programs written for PyTorch, run unchanged with ``ferrograd`` standing in for ``torch``
(``sys.modules["torch"] = ferrograd``, and its submodules), each in a process of its own so
that what it sets (threads, seeds) stays there."""

import subprocess
import sys
import textwrap

# Makes `import torch`, `import torch.nn as nn`, `import torch.onnx`, ... find ferrograd.
SHIM = """
import sys, ferrograd
sys.modules["torch"] = ferrograd
for name in ("nn", "nn.functional", "optim", "optim.lr_scheduler", "utils", "utils.data",
             "autograd", "onnx", "jit"):
    module = ferrograd
    for part in name.split("."):
        module = getattr(module, part)
    sys.modules["torch." + name] = module
"""


def run_as_torch(program):
    run = subprocess.run(
        [sys.executable, "-c", SHIM + textwrap.dedent(program)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_a_script_preamble_and_small_idioms_run():
    out = run_as_torch(
        """
        import torch
        import torch.nn as nn
        import torch.onnx  # only used behind a flag in such scripts

        torch.set_num_threads(1)
        assert torch.get_num_threads() == 1
        torch.set_num_threads(64)  # more than the pool has: the pool's size
        assert 1 <= torch.get_num_threads() <= 64
        x = torch.tensor([[1.0, -2.0], [3.0, 0.0]])
        assert x.type() == "torch.FloatTensor" and x.type(torch.float64).type() == "torch.DoubleTensor"
        assert x.type("torch.LongTensor").dtype == torch.int64
        assert x.is_contiguous() and not x.t().is_contiguous() and x.t().contiguous().is_contiguous()
        rows, cols = torch.where(x > 0)
        assert rows.tolist() == [0, 1] and cols.tolist() == [0, 0]
        assert torch.where(x > 0, x, torch.zeros_like(x)).tolist() == [[1.0, 0.0], [3.0, 0.0]]
        net = torch.jit.script(nn.Linear(2, 1))
        assert isinstance(net, nn.Linear) and torch.jit.trace(net, (x,)) is net
        assert callable(torch.onnx.export)
        print("ok")
        """
    )
    assert out == "ok\n"


def test_a_gradient_penalty_takes_the_gradient_not_its_first_row():
    # WGAN-GP's penalty, as its authors' PyTorch code writes it.
    out = run_as_torch(
        """
        import torch
        import torch.autograd as autograd

        torch.manual_seed(0)
        critic = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
        real, fake = torch.randn(5, 3), torch.randn(5, 3)
        alpha = torch.rand(5, 1)
        mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        out = critic(mixed)
        gradients = autograd.grad(outputs=out, inputs=mixed, grad_outputs=torch.ones_like(out),
                                  create_graph=True, retain_graph=True, only_inputs=True)[0]
        assert tuple(gradients.shape) == (5, 3)
        penalty = ((gradients.norm(2, dim=1) - 1) ** 2).mean()
        penalty.backward()
        # The input gradient does not involve the last bias: None there, as PyTorch's.
        grads = [p.grad for p in critic.parameters()]
        assert all(g is not None for g in grads[:3]) and grads[3] is None
        print("ok")
        """
    )
    assert out == "ok\n"


def test_module_hooks_extract_features_and_see_gradients():
    import numpy as np
    import pytest

    import ferrograd as fg
    import ferrograd.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x).relu()

    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), Block(), nn.Linear(3, 2))
    seen = {}
    # Feature extraction from a core layer and from a Python module.
    h1 = model[0].register_forward_hook(lambda m, args, out: seen.__setitem__("fc0", out))
    h2 = model[2].register_forward_hook(lambda m, args, out: seen.__setitem__("block", out))
    x = fg.randn(5, 4)
    y = model(x)
    assert tuple(seen["fc0"].shape) == (5, 3) and tuple(seen["block"].shape) == (5, 3)
    np.testing.assert_allclose(model[3](seen["block"]).detach().numpy(), y.detach().numpy(), rtol=1e-6)
    # A pre-hook replaces the input, a forward hook the output; handles remove them.
    with model[3].register_forward_pre_hook(lambda m, args: (args[0] * 0.0,)):
        assert np.allclose(model(x).detach().numpy(), model[3].bias.detach().numpy())
    doubled = model[3].register_forward_hook(lambda m, args, out: out * 2.0)
    np.testing.assert_allclose(model(x).detach().numpy(), 2 * y.detach().numpy(), rtol=1e-6)
    for h in (h1, h2, doubled):
        h.remove()
    seen.clear()
    np.testing.assert_allclose(model(x).detach().numpy(), y.detach().numpy(), rtol=1e-6)
    assert seen == {}
    # A backward hook sees the gradients of the call's input and output, and may scale them.
    grads = {}

    def record(m, grad_input, grad_output):
        grads["in"], grads["out"] = grad_input[0], grad_output[0]
        return (grad_input[0] * 0.5,)

    handle = model[3].register_full_backward_hook(record)
    w = model[0].weight
    w.grad = None
    model(x).sum().backward()
    np.testing.assert_allclose(grads["out"].numpy(), np.ones((5, 2)))
    np.testing.assert_allclose(grads["in"].numpy(), np.ones((5, 2)) @ model[3].weight.detach().numpy(), rtol=1e-6)
    halved = w.grad.numpy().copy()
    handle.remove()
    w.grad = None
    model(x).sum().backward()
    np.testing.assert_allclose(halved, 0.5 * w.grad.numpy(), rtol=1e-6)
    # Layers with calls of their own run their hooks too: attention maps, a recurrent state.
    attn = nn.MultiheadAttention(4, 2, batch_first=True)
    maps = []
    attn.register_forward_hook(lambda m, args, kwargs, out: maps.append(out[1]), with_kwargs=True)
    q = fg.randn(2, 3, 4)
    attn(q, q, q, need_weights=True)
    assert tuple(maps[0].shape) == (2, 3, 3)
    lstm = nn.LSTM(2, 3, batch_first=True)
    lstm.register_forward_pre_hook(lambda m, args: (args[0] * 0.0,))
    states = []
    lstm.register_forward_hook(lambda m, args, out: states.append(out[1][0]))
    out, (h, _) = lstm(fg.randn(1, 4, 2))
    assert states[0] is h and np.allclose(out.detach().numpy(), lstm(fg.zeros(1, 4, 2))[0].detach().numpy())
    with pytest.raises(NotImplementedError, match="returns one tensor"):
        lstm.register_full_backward_hook(lambda *a: None)
        lstm(fg.randn(1, 4, 2, requires_grad=True))


def test_hooks_need_no_hash_refuse_what_they_cannot_do_and_fire_once_per_pass():
    import numpy as np
    import pytest

    import ferrograd as fg
    import ferrograd.nn as nn

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.factor = 2.0

        def __eq__(self, other):  # and so no __hash__, as a dataclass's eq=True makes it
            return isinstance(other, Scale) and self.factor == other.factor

        def forward(self, x, y=None):
            return x * self.factor if y is None else x * y

    m = Scale()
    x = fg.ones(3, requires_grad=True)
    assert m(x).tolist() == [2.0, 2.0, 2.0]
    calls = []
    m.register_full_backward_hook(lambda mod, gi, go: calls.append(gi[0].tolist()))
    y = m(x).sum()
    y.backward()
    y.backward()
    assert calls == [[2.0, 2.0, 2.0]] * 2
    with pytest.raises(NotImplementedError, match="2 tensors that need gradients"):
        m(x, fg.ones(3, requires_grad=True))
    assert np.allclose(m(x, fg.ones(3)).detach().numpy(), 1.0)


def test_a_parameter_replaced_by_a_cropped_one_is_used():
    # nanoGPT's crop_block_size: a shorter position table replaces the longer one.
    import ferrograd as fg
    import ferrograd.nn as nn

    wpe = nn.Embedding(8, 4)
    first = wpe.weight.detach().numpy()[:5].copy()
    wpe.weight = nn.Parameter(wpe.weight[:5])
    assert tuple(wpe.weight.shape) == (5, 4)
    assert (wpe(fg.arange(5)).detach().numpy() == first).all()
    assert [tuple(p.shape) for p in wpe.parameters()] == [(5, 4)]
    # It survives copying and pickling whole.
    import copy
    import pickle

    for back in (copy.deepcopy(wpe), pickle.loads(pickle.dumps(wpe))):
        assert tuple(back.weight.shape) == (5, 4)
        assert (back(fg.arange(5)).detach().numpy() == first).all()


class Classifier(__import__("ferrograd").nn.Module):
    """A model of many kinds of layer, pickled whole below (a class pickle can import)."""

    def __init__(self):
        import ferrograd.nn as nn

        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.lstm = nn.LSTM(8, 8, num_layers=2, batch_first=True, bidirectional=True)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.block = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        self.head = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 3), nn.Dropout(0.1))
        self.register_buffer("scale", __import__("ferrograd").ones(1) * 2)

    def forward(self, ids):
        x, _ = self.lstm(self.embed(ids))
        x, _ = self.attn(x, x, x)
        return self.head(self.block(x)).mean(1) * self.scale


def test_a_whole_model_saves_and_loads_as_torch_save_does(tmp_path):
    import pickle

    import numpy as np
    import pytest

    import ferrograd as fg

    fg.manual_seed(0)
    model = Classifier()
    model.embed.weight.requires_grad = False
    model.eval()
    ids = fg.tensor(np.arange(12).reshape(2, 6) % 10)
    want = model(ids).detach().numpy()
    fg.save(model, tmp_path / "model.pt")
    # As PyTorch's, the default weights_only refuses a pickled class.
    with pytest.raises(pickle.UnpicklingError, match="Classifier"):
        fg.load(tmp_path / "model.pt")
    back = fg.load(tmp_path / "model.pt", weights_only=False)
    assert type(back) is Classifier and not back.training and not back.head[2].training
    np.testing.assert_allclose(back(ids).detach().numpy(), want, rtol=1e-6)
    assert not back.embed.weight.requires_grad and back.lstm.weight_ih_l1_reverse.requires_grad
    assert [n for n, _ in back.named_parameters()] == [n for n, _ in model.named_parameters()]
    # The copy trains on its own parameters.
    back.train()
    opt = fg.optim.SGD(back.parameters(), lr=0.1)
    back(ids).sum().backward()
    opt.step()
    assert not np.allclose(back.head[1].weight.detach().numpy(), model.head[1].weight.detach().numpy())


def test_a_word_language_model_trains_saves_and_reloads(tmp_path):
    # The idioms of PyTorch's word-level language-model example: a corpus batchified into
    # columns, an LSTM with dropout between layers and tied weights, hidden states detached
    # between batches, clipping and a hand-written SGD step on p.data, the whole model saved
    # and loaded back.
    program = f"""
        import math
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
        import torch.onnx

        class RNNModel(nn.Module):
            def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
                super().__init__()
                self.drop = nn.Dropout(dropout)
                self.encoder = nn.Embedding(ntoken, ninp)
                self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
                self.decoder = nn.Linear(nhid, ntoken)
                if tie_weights:
                    self.decoder.weight = self.encoder.weight
                self.init_weights()
                self.nhid, self.nlayers = nhid, nlayers

            def init_weights(self):
                nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
                nn.init.zeros_(self.decoder.bias)

            def forward(self, input, hidden):
                emb = self.drop(self.encoder(input))
                output, hidden = self.rnn(emb, hidden)
                decoded = self.decoder(self.drop(output)).view(-1, self.decoder.out_features)
                return F.log_softmax(decoded, dim=1), hidden

            def init_hidden(self, bsz):
                weight = next(self.parameters())
                return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                        weight.new_zeros(self.nlayers, bsz, self.nhid))

        def batchify(data, bsz):
            nbatch = data.size(0) // bsz
            data = data.narrow(0, 0, nbatch * bsz)
            return data.view(bsz, -1).t().contiguous()

        def repackage_hidden(h):
            return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)

        torch.manual_seed(1111)
        words = ("the cat sat on the mat and the dog sat on the log " * 40).split()
        vocab = sorted(set(words))
        ids = torch.tensor([vocab.index(w) for w in words]).type(torch.int64)
        train_data = batchify(ids, 4)
        model = RNNModel(len(vocab), 16, 16, 2, dropout=0.2, tie_weights=True)
        criterion = nn.NLLLoss()
        lr, bptt = 5.0, 8

        def evaluate():
            model.eval()
            total, hidden = 0.0, model.init_hidden(4)
            with torch.no_grad():
                for i in range(0, train_data.size(0) - 1, bptt):
                    seq_len = min(bptt, len(train_data) - 1 - i)
                    data, targets = train_data[i:i + seq_len], train_data[i + 1:i + 1 + seq_len].view(-1)
                    output, hidden = model(data, hidden)
                    total += len(data) * criterion(output, targets).item()
            return total / (len(train_data) - 1)

        before = evaluate()
        for epoch in range(6):
            model.train()
            hidden = model.init_hidden(4)
            for i in range(0, train_data.size(0) - 1, bptt):
                seq_len = min(bptt, len(train_data) - 1 - i)
                data, targets = train_data[i:i + seq_len], train_data[i + 1:i + 1 + seq_len].view(-1)
                model.zero_grad()
                hidden = repackage_hidden(hidden)
                output, hidden = model(data, hidden)
                loss = criterion(output, targets)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-lr)
        after = evaluate()
        assert after < before - 0.05, (before, after)  # a plateau near 1.97 is common, in PyTorch too
        with open({str(tmp_path / "model.pt")!r}, "wb") as f:
            torch.save(model, f)
        with open({str(tmp_path / "model.pt")!r}, "rb") as f:
            model = torch.load(f, weights_only=False)
            model.rnn.flatten_parameters()
        assert abs(evaluate() - after) < 1e-6
        print("ppl", round(math.exp(before), 1), round(math.exp(after), 1))
    """
    out = run_as_torch(program)
    assert out.startswith("ppl ")
