"""Python written as a PyTorch user writes it, checked against PyTorch's own numbers
(fixtures/torch_habits.json, made by fixtures/torch_habits.py) where PyTorch defines them."""

import collections
import copy
import json
import pathlib

import numpy as np
import pytest

import ferrograd as fg
import ferrograd.nn as nn
import ferrograd.nn.functional as F
from ferrograd.optim import lr_scheduler as S
from ferrograd.utils.data import DataLoader, Generator, TensorDataset

REF = json.loads((pathlib.Path(__file__).parent / "fixtures" / "torch_habits.json").read_text())
LOGITS = np.sin(np.arange(15).reshape(5, 3) * 0.7) * 2
TARGET = np.array([0, 2, 1, -100, 2])


def close(got, want, rtol=1e-12, atol=1e-15):
    np.testing.assert_allclose(
        np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), rtol=rtol, atol=atol
    )


# ---- gradients ----


def test_gradient_accumulation_over_three_micro_batches_then_a_momentum_step():
    lin = nn.Linear(3, 2)
    lin.weight.data = np.array([[0.1, -0.2, 0.3], [0.4, 0.5, -0.6]], dtype=np.float32)
    lin.bias.data = np.array([0.01, -0.02], dtype=np.float32)
    opt = fg.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    data = np.cos(np.arange(18).reshape(6, 3)).astype(np.float32)
    ys = np.sin(np.arange(12).reshape(6, 2)).astype(np.float32)
    for rep in range(2):
        opt.zero_grad()
        for k in range(3):
            (F.mse_loss(lin(data[2 * k : 2 * k + 2]), ys[2 * k : 2 * k + 2]) / 3).backward()
        if rep == 0:
            close(lin.weight.grad.numpy().ravel(), REF["accum_grad"][0], rtol=1e-5, atol=1e-6)
            close(lin.bias.grad.numpy(), REF["accum_grad"][1], rtol=1e-5, atol=1e-6)
        opt.step()
    close(lin.weight.numpy().ravel(), REF["accum_after"][0], rtol=1e-5, atol=1e-6)
    close(lin.bias.numpy(), REF["accum_after"][1], rtol=1e-5, atol=1e-6)


def test_zero_grad_sets_none_or_zeros_and_returned_gradients_stay_fresh():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    opt = fg.optim.SGD([w], lr=0.1)
    g1 = (w * w).sum().backward()
    g2 = (w * w).sum().backward()
    assert g1[w].tolist() == g2[w].tolist() == [2.0, 4.0]
    assert w.grad.tolist() == [4.0, 8.0]
    opt.zero_grad(set_to_none=False)
    assert w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


def test_clip_grad_norm_and_value():
    a = fg.tensor([3.0, 4.0], dtype=fg.float64, requires_grad=True)
    b = fg.tensor([[12.0]], dtype=fg.float64, requires_grad=True)
    a.grad, b.grad = np.array([3.0, 4.0]), np.array([[12.0]])
    total = nn.utils.clip_grad_norm_([a, b], 6.5)
    close(total.item(), REF["clip"][0])
    close(a.grad.numpy(), REF["clip"][1])
    close(b.grad.numpy(), REF["clip"][2])
    a.grad, b.grad = np.array([3.0, -4.0]), np.array([[12.0]])
    total = nn.utils.clip_grad_norm_([a, b], 2.0, norm_type=float("inf"))
    close(total.item(), REF["clip_inf"][0])
    close(a.grad.numpy(), REF["clip_inf"][1])
    nn.utils.clip_grad_value_([a, b], 0.5)
    assert a.grad.numpy().max() <= 0.5 and a.grad.numpy().min() >= -0.5


def test_param_groups_with_their_own_lr_and_weight_decay():
    w1 = fg.tensor([[1.0, -2.0], [0.5, 3.0]], dtype=fg.float64, requires_grad=True)
    b1 = fg.tensor([0.1, -0.2], dtype=fg.float64, requires_grad=True)
    opt = fg.optim.AdamW(
        [{"params": [w1], "weight_decay": 0.1}, {"params": [b1], "weight_decay": 0.0, "lr": 0.01}],
        lr=0.05,
        betas=(0.9, 0.99),
    )
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.01]
    assert opt.param_groups[0]["params"][0] is w1
    x = fg.tensor([[1.0, 2.0], [3.0, -1.0]], dtype=fg.float64)
    for _ in range(3):
        opt.zero_grad()
        ((x @ w1.transpose(0, 1) + b1) ** 2).mean().backward()
        opt.step()
        opt.param_groups[0]["lr"] *= 0.5
    close(w1.numpy().ravel(), REF["groups"][0], rtol=1e-10)
    close(b1.numpy(), REF["groups"][1], rtol=1e-10)


# ---- losses and functional ----


@pytest.mark.parametrize(
    "key,kwargs",
    [
        ("ce_plain", {}),
        ("ce_smooth", {"label_smoothing": 0.1}),
        ("ce_weight_smooth", {"weight": fg.tensor([0.5, 1.0, 2.0], dtype=fg.float64), "label_smoothing": 0.2}),
        ("ce_sum", {"reduction": "sum"}),
    ],
)
def test_cross_entropy_with_class_indices(key, kwargs):
    x = fg.tensor(LOGITS, requires_grad=True)
    loss = nn.CrossEntropyLoss(**kwargs)(x, fg.tensor(TARGET))
    loss.backward()
    close(loss.item(), REF[key][0])
    close(x.grad.numpy().ravel(), REF[key][1], atol=1e-14)


@pytest.mark.parametrize("reduction", ["sum", "none"])
@pytest.mark.parametrize(
    "key,make",
    [
        ("mse", lambda r: nn.MSELoss(reduction=r)),
        ("l1", lambda r: nn.L1Loss(reduction=r)),
        ("l1", lambda r: nn.MAELoss(reduction=r)),
        ("huber", lambda r: nn.HuberLoss(reduction=r, delta=0.5)),
    ],
)
def test_element_wise_losses_take_pytorchs_reductions(key, make, reduction):
    x = fg.tensor(np.sin(np.arange(6).reshape(2, 3) * 1.3) * 2, requires_grad=True)
    loss = make(reduction)(x, fg.tensor(np.cos(np.arange(6).reshape(2, 3))))
    assert loss.shape == (() if reduction == "sum" else (2, 3))
    loss.sum().backward()
    close(loss.numpy().ravel(), REF[f"{key}_{reduction}"][0])
    close(x.grad.numpy().ravel(), REF[f"{key}_{reduction}"][1])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_nll_loss_ignores_minus_100_and_takes_reductions(reduction):
    x = fg.tensor(F.log_softmax(fg.tensor(LOGITS), 1).numpy(), requires_grad=True)
    loss = nn.NLLLoss(reduction=reduction)(x, fg.tensor(TARGET))
    loss.sum().backward()
    close(np.ravel(loss.numpy()), REF[f"nll_{reduction}"][0])
    close(x.grad.numpy().ravel(), REF[f"nll_{reduction}"][1])


def test_a_loss_left_unreduced_cannot_train_a_model():
    net = nn.Net([nn.Dense(2, 1)])
    with pytest.raises(ValueError, match="reduction='none'"):
        fg.Model(net, nn.MSELoss(reduction="none"), fg.optim.SGD(lr=0.1))
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="average")
    # With "sum" the model trains on the sum: twice the mean's gradient for two elements.
    x, y = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.array([[1.0], [0.0]], np.float32)
    grads = {}
    for r in ("mean", "sum"):
        fg.manual_seed(0)
        model = fg.Model(nn.Net([nn.Dense(2, 1)]), nn.MSELoss(reduction=r), fg.optim.SGD(lr=0.1))
        _, g = model.backward(model.forward(x), y)
        grads[r] = g[dict(model.net.named_parameters())["0.weight"]].numpy()
    assert np.abs(grads["mean"]).sum() > 0
    np.testing.assert_array_equal(grads["sum"], 2 * grads["mean"])


def test_cross_entropy_over_a_spatial_axis_and_with_probabilities():
    x = fg.tensor(np.sin(np.arange(24).reshape(2, 3, 4) * 0.3), requires_grad=True)
    loss = F.cross_entropy(x, fg.tensor(np.arange(8).reshape(2, 4) % 3))
    loss.backward()
    close(loss.item(), REF["ce_spatial"][0])
    close(x.grad.numpy().ravel(), REF["ce_spatial"][1], atol=1e-14)
    probs = np.abs(np.cos(np.arange(15).reshape(5, 3)))
    probs /= probs.sum(1, keepdims=True)
    x = fg.tensor(LOGITS, requires_grad=True)
    loss = F.cross_entropy(x, probs, label_smoothing=0.1)
    loss.backward()
    close(loss.item(), REF["ce_probs"][0])
    close(x.grad.numpy().ravel(), REF["ce_probs"][1], atol=1e-14)
    with pytest.raises(IndexError):
        F.cross_entropy(fg.tensor(LOGITS), fg.tensor([0, 1, 2, 3, 0]))


def test_functional_activations_and_losses():
    xv = np.linspace(-3, 3, 7)
    close(F.gelu(fg.tensor(xv), approximate="tanh").numpy(), REF["gelu_tanh"], atol=1e-15)
    close(F.silu(fg.tensor(xv)).numpy(), REF["silu"], atol=1e-15)
    tt = (np.arange(7) % 2).astype(float)
    x = fg.tensor(xv, requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(x, tt, pos_weight=fg.tensor(2.0, dtype=fg.float64))
    loss.backward()
    close(loss.item(), REF["bce_logits"][0])
    close(x.grad.numpy(), REF["bce_logits"][1], atol=1e-15)
    close(F.smooth_l1_loss(fg.tensor(xv), tt, beta=0.5).item(), REF["smooth_l1"])
    close(F.huber_loss(fg.tensor(xv), tt, delta=0.5).item(), REF["huber"])
    assert F.one_hot(fg.tensor([0, 2, 1]), 4).tolist() == [[1, 0, 0, 0], [0, 0, 1, 0], [0, 1, 0, 0]]
    assert F.pad(fg.zeros(1, 2, 2), (1, 0, 0, 2)).shape == (1, 4, 3)
    emb = F.embedding(fg.tensor([[0, 2], [1, 1]]), fg.tensor(np.arange(6.0).reshape(3, 2)))
    assert emb.tolist() == [[[0.0, 1.0], [4.0, 5.0]], [[2.0, 3.0], [2.0, 3.0]]]
    fg.manual_seed(0)
    kept = F.dropout(fg.ones(10000), 0.25)
    assert abs(float((kept != 0).float().mean()) - 0.75) < 0.02
    np.testing.assert_allclose(np.unique(kept.numpy()), [0.0, 4 / 3], rtol=1e-6)
    assert F.dropout(fg.ones(3), 0.5, training=False).tolist() == [1.0, 1.0, 1.0]


# ---- schedulers ----


def schedule(make, n, lr=0.1):
    p = fg.tensor([0.0], requires_grad=True)
    opt = fg.optim.SGD([p], lr=lr)
    sched = make(opt)
    got = []
    for _ in range(n):
        got.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert opt.lr == opt.param_groups[0]["lr"]
    return got


@pytest.mark.parametrize(
    "key,n,make",
    [
        ("steplr", 10, lambda o: S.StepLR(o, 3, 0.5)),
        ("multisteplr", 8, lambda o: S.MultiStepLR(o, [2, 5, 5], 0.1)),
        ("cosine", 14, lambda o: S.CosineAnnealingLR(o, 5, 0.001)),
        ("onecycle", 12, lambda o: S.OneCycleLR(o, 0.5, total_steps=12, cycle_momentum=False)),
        (
            "onecycle_linear3",
            12,
            lambda o: S.OneCycleLR(
                o, 0.5, total_steps=12, cycle_momentum=False, anneal_strategy="linear", three_phase=True
            ),
        ),
        (
            "sequential",
            10,
            lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 3), S.CosineAnnealingLR(o, 6, 0.0)], [3]),
        ),
        ("lambda", 5, lambda o: S.LambdaLR(o, lambda e: 1.0 / (1 + e))),
        ("exponential", 5, lambda o: S.ExponentialLR(o, 0.9)),
        ("constant", 6, lambda o: S.ConstantLR(o, 0.5, 3)),
    ],
)
def test_schedulers_give_pytorchs_learning_rates(key, n, make):
    close(schedule(make, n), REF[key], rtol=1e-12, atol=1e-17)


@pytest.mark.parametrize(
    "key,make,slot",
    [
        ("onecycle_sgd", lambda ps: fg.optim.SGD(ps, lr=0.1, momentum=0.9), "momentum"),
        ("onecycle_adam", lambda ps: fg.optim.Adam(ps, lr=0.1), "betas"),
    ],
)
def test_one_cycle_cycles_the_momentum_the_optimizer_then_uses(key, make, slot):
    p = fg.tensor(np.array([1.0, -2.0]), requires_grad=True)
    opt = make([p])
    sched = S.OneCycleLR(opt, 0.5, total_steps=10)  # cycle_momentum=True, PyTorch's default
    rows = []
    for _ in range(10):
        g = opt.param_groups[0]
        rows.append([g["lr"], g[slot] if slot == "momentum" else g[slot][0]])
        opt.zero_grad()
        (p * p * fg.tensor(np.array([1.0, 3.0]))).sum().backward()
        opt.step()
        sched.step()
    close(rows, REF[key][0])
    close(p.numpy(), REF[key][1], rtol=1e-12)


def test_one_cycle_momentum_needs_an_optimizer_that_has_one():
    opt = fg.optim.Adagrad([fg.tensor([0.0], requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="momentum or beta1"):
        S.OneCycleLR(opt, 0.5, total_steps=10)
    # Plain SGD shows momentum 0, as PyTorch's, but keeps no buffer to cycle one with.
    opt = fg.optim.SGD([fg.tensor([0.0], requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="no momentum buffer"):
        S.OneCycleLR(opt, 0.5, total_steps=10)
    opt = fg.optim.SGD([fg.tensor([0.0], requires_grad=True)], lr=0.1, momentum=0.9)
    with pytest.raises(ValueError, match="expected 1 values for max_momentum"):
        S.OneCycleLR(opt, 0.5, total_steps=10, max_momentum=[0.9, 0.95])
    # Betas as a list, and a "momentum" key on an Adam group left alone, as PyTorch does.
    opt = fg.optim.Adam([fg.tensor([0.0], requires_grad=True)], lr=0.1)
    opt.param_groups[0]["betas"] = [0.8, 0.99]
    opt.param_groups[0]["momentum"] = 0.5
    opt.step()


# ---- modules ----


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)
        self.register_buffer("steps", fg.zeros(1))

    def forward(self, x):
        return self.bn(self.fc(x)).relu()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = fg.tensor(np.ones(1, dtype=np.float32), requires_grad=True)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Sequential(nn.Linear(3, 2), nn.ReLU())

    def forward(self, x, shift=0.0):
        x = self.blocks[0](x)
        x = self.blocks[1](nn.functional.pad(x, (0, 1)))
        return self.head(x) * self.scale + shift


def test_a_nested_modules_state_dict_has_pytorchs_keys_and_round_trips(tmp_path):
    fg.manual_seed(0)
    model = Model()
    assert list(model.state_dict()) == REF["keys"]
    x = np.cos(np.arange(24).reshape(6, 4)).astype(np.float32)
    model(x)  # training mode: the batch norms' statistics move
    state = model.state_dict()
    assert state["blocks.0.bn.num_batches_tracked"].item() == 1
    assert float(state["blocks.1.bn.running_mean"].abs().sum()) > 0
    fg.save(state, tmp_path / "model.safetensors")
    fg.manual_seed(1)
    other = Model()
    other.load_state_dict(fg.load(tmp_path / "model.safetensors"))
    for k, v in other.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), state[k].numpy(), err_msg=k)
    model.eval()
    other.eval()
    np.testing.assert_array_equal(model(x, shift=1.0).numpy(), other(x, shift=1.0).numpy())
    other.save(tmp_path / "again.safetensors")
    Model().load(tmp_path / "again.safetensors")


def test_load_state_dict_checks_everything_first_and_changes_nothing_on_error():
    model = Model()
    state = model.state_dict()
    before = model.blocks[0].fc.weight.numpy().copy()
    bad = dict(state)
    bad["blocks.0.fc.weight"] = np.ones((4, 4), dtype=np.float32)
    bad["blocks.0.bn.weight"] = np.zeros(3, dtype=np.float32)
    with pytest.raises(RuntimeError, match="wrong shape"):
        model.load_state_dict(bad)
    np.testing.assert_array_equal(model.blocks[0].fc.weight.numpy(), before)
    assert model.blocks[0].bn.state_dict()["weight"].tolist() == [1.0, 1.0, 1.0]
    partial = {k: v for k, v in state.items() if not k.startswith("head")}
    missing, unexpected = model.load_state_dict(partial, strict=False)
    assert missing == ["head.0.weight", "head.0.bias"] and unexpected == []


def test_parameters_are_listed_once_when_tied_and_modules_print_as_a_tree():
    model = Model()
    names = [n for n, _ in model.named_parameters()]
    assert names[0] == "scale" and "blocks.1.bn.weight" in names and len(names) == len(set(names))
    assert len(list(model.buffers())) == 2 * 4
    tied = nn.ModuleDict({"a": nn.Linear(2, 2)})
    tied["b"] = tied["a"]
    assert len(list(tied.parameters())) == 2
    text = repr(model)
    assert text.startswith("Model(\n  (blocks): ModuleList(\n    (0): Block(\n      (fc): ")
    assert "(head): " in text


def test_a_python_module_inside_a_net_brings_its_layers_buffers():
    net = nn.Net([Block(), nn.Linear(3, 1)])
    keys = list(net.state_dict())
    assert "0.bn.running_mean" in keys and "0.bn.num_batches_tracked" in keys


# ---- tensors ----


def test_type_promotion_and_boolean_comparisons():
    ints = fg.tensor([1, 2, 3])
    assert ints.dtype == fg.int64
    half = ints * 0.5
    assert half.dtype == fg.float32 and half.tolist() == [0.5, 1.0, 1.5]
    assert (ints + 1).dtype == fg.int64 and (ints * 2).tolist() == [2, 4, 6]
    assert (ints / 2).dtype == fg.float32
    assert (ints + fg.tensor([0.5], dtype=fg.float64)).dtype == fg.float64
    assert (fg.tensor([1.0, 2.0]) + ints[:2]).dtype == fg.float32
    mask = fg.tensor([1.0, -2.0, 3.0]) > 0
    assert mask.dtype == fg.bool and mask.tolist() == [True, False, True]
    assert mask.numpy().dtype == np.bool_
    assert bool(mask.any()) and not bool(mask.all()) and (~mask).tolist() == [False, True, False]
    assert (mask & fg.tensor([True, True, False])).tolist() == [True, False, False]
    assert (mask | ~mask).all().item() is True
    assert mask.sum().item() == 2 and mask.sum().dtype == fg.int64
    x = fg.tensor([10.0, 20.0, 30.0])
    assert x[mask].tolist() == [10.0, 30.0]
    assert fg.where(mask, x, 0.0).tolist() == [10.0, 0.0, 30.0]
    assert (x * mask).tolist() == [10.0, 0.0, 30.0] and (x * mask).dtype == fg.float32
    assert (ints == 2).tolist() == [False, True, False]
    assert x.to("cpu") is x and x.cpu() is x and x.to(fg.float64).dtype == fg.float64
    with pytest.raises(ValueError, match="CPU"):
        x.to("cuda")
    assert fg.tensor(np.array([True, False])).dtype == fg.bool


def test_dataloader_batches_shuffles_reproducibly_and_drops_the_last():
    xs = np.arange(10, dtype=np.float32).reshape(10, 1)
    ys = np.arange(10)
    ds = TensorDataset(xs, ys)
    assert len(ds) == 10 and ds[3][1].item() == 3
    plain = [b[1].tolist() for b in DataLoader(ds, batch_size=4)]
    assert plain == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(DataLoader(ds, batch_size=4, drop_last=True)) == 2
    a = [b[1].tolist() for b in DataLoader(ds, batch_size=3, shuffle=True, generator=Generator().manual_seed(7))]
    b = [b[1].tolist() for b in DataLoader(ds, batch_size=3, shuffle=True, generator=Generator().manual_seed(7))]
    assert a == b and sorted(sum(a, [])) == list(range(10)) and sum(a, []) != list(range(10))

    class Squares(fg.utils.data.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(2, i, dtype=np.float32), "y": i * i}

    batch = next(iter(DataLoader(Squares(), batch_size=5)))
    assert batch["x"].shape == (5, 2) and batch["y"].tolist() == [0, 1, 4, 9, 16]


def test_init_functions_fill_in_place_with_pytorchs_bounds():
    lin = nn.Linear(50, 40)
    w = lin.weight
    nn.init.kaiming_uniform_(w, a=5**0.5)
    bound = 1 / 50**0.5  # PyTorch's default Linear init
    assert lin.weight is w and np.abs(w.numpy()).max() <= bound
    nn.init.xavier_normal_(w)
    assert abs(w.numpy().std() - (2 / 90) ** 0.5) < 0.01
    nn.init.zeros_(lin.bias)
    assert lin.bias.tolist() == [0.0] * 40
    nn.init.trunc_normal_(w, std=1.0, a=-0.5, b=0.5)
    assert np.abs(w.numpy()).max() <= 0.5
    q = nn.init.orthogonal_(fg.zeros(4, 6).requires_grad_())
    np.testing.assert_allclose(q.numpy() @ q.numpy().T, np.eye(4), atol=1e-6)


def test_sequential_with_names_and_modules_with_keyword_arguments():
    seq = nn.Sequential(collections.OrderedDict([("fc", nn.Linear(2, 2)), ("act", nn.ReLU())]))
    assert [n for n, _ in seq.named_parameters()] == ["fc.weight", "fc.bias"]
    assert seq(np.ones((1, 2), dtype=np.float32)).shape == (1, 2)
    model = Model()
    model.eval()
    x = np.ones((2, 4), dtype=np.float32)
    np.testing.assert_allclose((model(x, shift=2.0) - model(x)).numpy(), 2.0, rtol=1e-6)


def test_convolution_and_pooling_take_pytorchs_per_axis_sizes_and_same_padding():
    x = fg.tensor(np.sin(np.arange(40).reshape(1, 2, 4, 5) * 0.7))
    same = nn.Conv2d(2, 3, (2, 2), dilation=(1, 2), padding="same")
    rect = nn.Conv2d(2, 2, (3, 5), stride=(1, 2), padding=(1, 2))
    for layer, scale in ((same, 0.3), (rect, 0.2)):
        layer.weight.data = np.cos(np.arange(layer.weight.numel()) * scale).reshape(layer.weight.shape)
        layer.bias.data = np.arange(layer.bias.numel()) * 0.1
    xf = x.float()
    close(same(xf).numpy().ravel(), REF["conv_same"], rtol=1e-5, atol=1e-5)
    close(rect(xf).numpy().ravel(), REF["conv_rect"], rtol=1e-5, atol=1e-5)
    assert rect.weight.shape == (2, 2, 3, 5) and same(xf).shape == (1, 3, 4, 5)
    w = fg.tensor(np.cos(np.arange(24) * 0.3).reshape(3, 2, 2, 2))
    close(
        F.conv2d(x, w, dilation=(1, 2), padding="same").numpy().ravel() + np.repeat([0.0, 0.1, 0.2], 20),
        REF["conv_same"],
        atol=1e-12,
    )
    with pytest.raises(ValueError, match="stride 1"):
        nn.Conv2d(1, 8, (3, 5), stride=(1, 2), padding="same")
    xp = fg.tensor(np.sin(np.arange(70).reshape(1, 2, 5, 7) * 0.9))
    close(F.max_pool2d(xp, (2, 3), stride=(1, 2)).numpy().ravel(), REF["maxpool_rect"])
    close(nn.AvgPool2d((3, 2), stride=(2, 1), padding=(1, 1))(xp).numpy().ravel(), REF["avgpool_rect"])


def test_modules_convert_their_dtype_in_place():
    model = Model()
    params = list(model.parameters())
    assert model.double() is model
    assert all(v.dtype == fg.float64 for k, v in model.state_dict().items() if "num_batches" not in k)
    assert [id(p) for p in model.parameters()] == [id(p) for p in params]  # same leaves
    y = model(np.ones((2, 4)))
    assert y.dtype == fg.float64
    model.to(fg.float32)
    assert model.blocks[0].fc.weight.dtype == fg.float32 and model.scale.dtype == fg.float32
    with pytest.raises(ValueError, match="CPU"):
        model.to("cuda")


def test_settings_no_group_reads_are_errors_and_nll_keeps_spatial_shape():
    w = fg.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="momentum"):
        fg.optim.SGD([{"params": [w], "momentum": 0.9}], lr=0.1)
    opt = fg.optim.SGD([w], lr=0.1, weight_decay=0.01)
    sched = S.StepLR(opt, 1, 0.5)
    sched.step()
    opt.add_param_group({"params": [fg.tensor([2.0], requires_grad=True)]})
    assert opt.param_groups[1]["lr"] == 0.1 and opt.param_groups[1]["weight_decay"] == 0.01
    logp = F.log_softmax(fg.tensor(np.sin(np.arange(24).reshape(2, 3, 4))), dim=1)
    per = F.nll_loss(logp, fg.tensor(np.arange(8).reshape(2, 4) % 3), reduction="none")
    assert per.shape == (2, 4)


# ---- layers as torch.nn modules ----


def closed_form(layer, scale):
    """The weights torch_habits.py gives the same layer, in float64."""
    layer.double()
    for i, p in enumerate(layer.parameters()):
        p.data = np.sin(np.arange(p.numel()) * scale + i).reshape(p.shape) * 0.4
    return layer


def test_recurrent_layers_take_pytorchs_layout_and_return_pytorchs_tuples():
    xs = np.cos(np.arange(30).reshape(5, 2, 3) * 0.45)  # [T, N, F], PyTorch's default layout
    out, (h, c) = closed_form(nn.LSTM(3, 4, num_layers=2), 0.37)(fg.tensor(xs))
    for got, want in zip((out, h, c), REF["lstm_seq_first"]):
        close(got.numpy().ravel(), want, rtol=1e-10, atol=1e-12)
    # one unbatched sequence [T, F] with an initial state [L, H]
    h0 = np.sin(np.arange(8).reshape(2, 4)) * 0.5
    out, h = closed_form(nn.GRU(3, 4), 0.29)(fg.tensor(xs[:, 0]), fg.tensor(h0[:1]))
    assert out.shape == (5, 4) and h.shape == (1, 4)
    for got, want in zip((out, h), REF["gru_unbatched"]):
        close(got.numpy().ravel(), want, rtol=1e-10, atol=1e-12)
    # batch_first=True reads the same numbers from [N, T, F]; inside a Net the output alone
    lstm = closed_form(nn.LSTM(3, 4, num_layers=2, batch_first=True), 0.37)
    out, _ = lstm(fg.tensor(xs.transpose(1, 0, 2).copy()))
    close(out.numpy().transpose(1, 0, 2).ravel(), REF["lstm_seq_first"][0], rtol=1e-10, atol=1e-12)
    time_first = closed_form(nn.LSTM(3, 4, num_layers=2), 0.37)
    close(nn.Net([time_first])(fg.tensor(xs)).numpy().ravel(), REF["lstm_seq_first"][0], rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="Unknown nonlinearity 'gelu'"):
        nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.raises(ValueError, match="dropout should be a number"):
        nn.LSTM(3, 4, num_layers=2, dropout=1.5)


def _values_and_input_grad(layer, x, h0=None, state_weight=0.0):
    x = fg.tensor(x, dtype=fg.float64, requires_grad=True)
    out, state = layer(x) if h0 is None else layer(x, fg.tensor(h0))
    h = state[0] if isinstance(state, tuple) else state
    (out.sum() + h.sum() * state_weight).backward()
    return out, state, x.grad


def test_bidirectional_bias_free_and_relu_stacks_give_pytorchs_numbers():
    xs = np.cos(np.arange(30).reshape(5, 2, 3) * 0.45)
    lstm = closed_form(nn.LSTM(3, 4, num_layers=2, bidirectional=True), 0.31)
    out, (h, c), gx = _values_and_input_grad(lstm, xs, state_weight=0.5)
    want = REF["lstm_bidirectional"]
    assert out.shape == (5, 2, 8) and h.shape == (4, 2, 4)
    for got, w in zip((out, h, c, gx), want[:4]):
        close(got.numpy().ravel(), w, rtol=1e-10, atol=1e-12)
    assert [n for n, _ in lstm.named_parameters()] == want[4]
    gru = closed_form(nn.GRU(3, 4, bias=False, batch_first=True), 0.23)
    out, h, gx = _values_and_input_grad(gru, xs.transpose(1, 0, 2).copy())
    for got, w in zip((out, h, gx), REF["gru_no_bias"][:3]):
        close(got.numpy().ravel(), w, rtol=1e-10, atol=1e-12)
    assert [n for n, _ in gru.named_parameters()] == REF["gru_no_bias"][3]
    rnn = closed_form(nn.RNN(3, 4, num_layers=2, nonlinearity="relu", bidirectional=True, bias=False), 0.41)
    h0 = np.sin(np.arange(32).reshape(4, 2, 4)) * 0.3
    out, h, gx = _values_and_input_grad(rnn, xs, h0, state_weight=1.0)
    for got, w in zip((out, h, gx), REF["rnn_relu_bidirectional"]):
        close(got.numpy().ravel(), w, rtol=1e-10, atol=1e-12)


def test_dropout_between_recurrent_layers_acts_in_training_only():
    fg.manual_seed(3)
    lstm = nn.LSTM(3, 8, num_layers=3, dropout=0.5, batch_first=True)
    plain = copy.deepcopy(lstm)
    x = fg.randn(4, 6, 3)
    lstm.eval()
    evaluated = lstm(x)[0].numpy()
    # The same weights without dropout, in training mode: what eval mode computes.
    no_dropout = nn.LSTM(3, 8, num_layers=3, batch_first=True)
    no_dropout.load_state_dict(lstm.state_dict())
    close(evaluated, no_dropout(x)[0].numpy(), rtol=1e-6, atol=1e-7)
    plain.train()
    a, b = plain(x)[0].numpy(), plain(x)[0].numpy()
    assert not np.allclose(a, evaluated) and not np.allclose(a, b)
    # No dropout after the last layer: a single layer trains and evaluates alike.
    single = nn.LSTM(3, 8, num_layers=1, dropout=0.5, batch_first=True)
    single.train()
    trained = single(x)[0].numpy()
    single.eval()
    close(single(x)[0].numpy(), trained, rtol=0, atol=0)
    assert lstm.dropout == 0.5


def test_print_module_shows_the_tree_as_pytorch_prints_it():
    source, printed = REF["repr"]  # the same constructor calls, printed by PyTorch
    assert repr(eval(source, {"nn": nn})) == printed
    assert repr(nn.Net([nn.Linear(2, 3), nn.Tanh()])) == (
        "Net(\n  (0): Linear(in_features=2, out_features=3, bias=True)\n  (1): Tanh()\n)"
    )


def test_core_layers_are_modules_with_pytorchs_methods():
    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())
            self.out = nn.Linear(4, 2)

        def forward(self, x):
            return self.out(self.body(x))

    m = Head()
    assert isinstance(nn.Linear(2, 2), nn.Module) and issubclass(nn.ReLU, nn.Module)
    assert not isinstance(fg.ones(2), nn.Module)
    names = [n for n, _ in m.named_modules()]
    assert names == ["", "body", "body.0", "body.1", "body.2", "out"]
    assert [type(c).__name__ for c in m.body.children()] == ["Linear", "BatchNorm1d", "ReLU"]
    assert [t.shape for t in m.body[1].buffers()] == [(4,), (4,), ()]
    assert [n for n, _ in m.named_buffers()] == [
        "body.1.running_mean",
        "body.1.running_var",
        "body.1.num_batches_tracked",
    ]
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ["Linear", "BatchNorm1d", "ReLU", "Sequential", "Linear", "Head"]
    m(fg.randn(5, 3)).sum().backward()
    m.body.zero_grad(set_to_none=False)
    assert m.body[0].weight.grad.abs().sum().item() == 0 and m.out.weight.grad is not None
    m.out.zero_grad()
    assert m.out.weight.grad is None
    assert m.to("cpu") is m and m.body[0].cpu() is m.body[0]
    m.body[0].to(fg.float64)
    assert m.body[0].weight.dtype == fg.float64
    with pytest.raises(TypeError):
        m.body[0].to(fg.int64)
    assert m.body[0].requires_grad_(False) is m.body[0] and not m.body[0].weight.requires_grad
    assert [n for n, _ in nn.Net([nn.Linear(2, 2)]).named_parameters(prefix="net")] == ["net.0.weight", "net.0.bias"]
    assert [n for n, _ in m.named_parameters(prefix="head")][:2] == ["head.body.0.weight", "head.body.0.bias"]
    enc = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
    own = sum(len(list(sub.parameters(recurse=False))) for sub in enc.modules())
    assert own == len(list(enc.parameters())) == 12  # a built-in layer owns its parts' parameters
    seq = nn.Sequential(nn.Linear(2, 2))
    assert seq.to("float64") is seq and seq[0].weight.dtype == fg.float64
    assert list(nn.Net([nn.Linear(2, 2)]).parameters(recurse=False)) == []


def test_sequential_is_a_module_that_indexes_slices_and_grows():
    seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
    seq.append(nn.Linear(4, 2))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear)
    head = seq[1:]
    assert isinstance(head, nn.Sequential) and [n for n, _ in head.named_children()] == ["1", "2"]
    assert head[1] is seq[2]
    seq.insert(0, nn.Identity())
    assert [type(m).__name__ for m in seq] == ["Identity", "Linear", "ReLU", "Linear"]
    del seq[0]  # the rest numbered again, as PyTorch's
    assert [n for n, _ in seq.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    x = fg.randn(5, 3)
    close(seq(x).numpy(), seq[2](seq[1](seq[0](x))).numpy())


def test_linear_draws_pytorchs_initialisation_and_dense_keeps_tinynns():
    fg.manual_seed(0)
    lin = nn.Linear(400, 300)
    bound = 1 / np.sqrt(400)
    for p in (lin.weight.numpy(), lin.bias.numpy()):
        assert np.abs(p).max() <= bound and np.abs(p).max() > 0.9 * bound
        assert abs(p.std() - bound / np.sqrt(3)) < 0.1 * bound  # U(±b) has std b/√3
    dense = nn.Dense(400, 300)
    assert np.abs(dense.bias.numpy()).max() == 0 and np.abs(dense.weight.numpy()).max() > bound


def test_layers_take_pytorchs_arguments():
    bn = nn.BatchNorm1d(2, eps=1e-3, momentum=0.3)
    bn(fg.tensor(np.array([[1.0, 2.0], [3.0, 6.0]], dtype=np.float32)))
    close(bn.running_mean.numpy(), [0.6, 1.2], rtol=1e-6)
    x = fg.randn(2, 3, 4)
    assert nn.Flatten(0, 1)(x).shape == (6, 4) and nn.Flatten()(x).shape == (2, 12)
    close(nn.Softmax(dim=-1)(x).numpy(), F.softmax(x, dim=2).numpy())
    close(nn.LogSoftmax(dim=-1)(x).numpy(), F.log_softmax(x, dim=-1).numpy(), atol=1e-6)
    close(nn.GELU(approximate="tanh")(x).numpy(), x.gelu("tanh").numpy())
    close(nn.SiLU()(x).numpy(), (x * x.sigmoid()).numpy())
    ln = nn.LayerNorm([4], eps=0.5)
    close(ln(x).numpy(), F.layer_norm(x, (4,), eps=0.5).numpy())
    xn = x.numpy().astype(np.float64)
    want = (xn - xn.mean(-1, keepdims=True)) / np.sqrt(xn.var(-1, keepdims=True) + 0.5)
    close(F.layer_norm(x, 4, eps=0.5).numpy(), want, rtol=1e-5, atol=1e-6)
    for refused in (
        lambda: nn.BatchNorm2d(3, affine=False),
        lambda: nn.BatchNorm1d(3, momentum=None),
        lambda: nn.LayerNorm((2, 3)),
        lambda: nn.Softplus(beta=2.0),
    ):
        with pytest.raises(NotImplementedError):
            refused()
    with pytest.raises(ValueError):
        nn.GELU(approximate="erf")


def test_either_languages_spelling_names_the_same_class():
    assert nn.MseLoss is nn.MSELoss and nn.NllLoss is nn.NLLLoss and nn.CrossEntropy is nn.CrossEntropyLoss
    assert nn.Lstm is nn.LSTM and nn.Relu is nn.ReLU and nn.Conv2D is nn.Conv2d
    assert fg.optim.RMSprop is fg.optim.RMSProp and fg.optim.Sgd is fg.optim.SGD


def test_type_promotion_of_integers_and_0d_tensors_follows_pytorchs():
    a, f = fg.tensor([1, -2, 3]), fg.tensor([5.5, -5.5, 0.25])
    names = {"T": fg, "a": a, "f": f}
    for expr, (dtype, values) in REF["promotion"].items():
        got = eval(expr, names)
        assert got.dtype.name == dtype, f"{expr}: {got.dtype.name}, PyTorch {dtype}"
        if dtype == "int64":
            assert got.tolist() == values, expr  # integers exactly, beyond 2^53 too
        else:
            close(np.asarray(got.tolist(), dtype=np.float64), np.asarray(values, dtype=np.float64), rtol=1e-6, atol=0)
    for zero in (lambda: a // 0, lambda: a % fg.tensor([1, 0, 1]), lambda: 5 // fg.tensor([0])):
        with pytest.raises(ZeroDivisionError):
            zero()


def test_pytorchs_other_spellings_and_in_place_methods():
    a, b = fg.tensor([1.0, float("nan"), float("inf")]), fg.tensor([2.0, 2.0, 2.0])
    assert a.isnan().tolist() == [False, True, False] and fg.isinf(a).tolist() == [False, False, True]
    assert fg.isfinite(a).tolist() == [True, False, False] and fg.isnan(fg.tensor([1, 2])).tolist() == [False, False]
    assert b.eq(2).all() and b.ne(1).all() and b.gt(1).all() and b.le(2).all()
    close(b.add(1).numpy(), [3, 3, 3])
    close(b.mul(b).numpy(), [4, 4, 4])
    assert fg.logical_not(b > 2).all() and fg.equal(b, fg.full_like(b, 2.0)) and not fg.equal(b, b[:2])
    m = fg.randn(2, 3)
    close(m.t().numpy(), m.numpy().T)
    close(m.mm(m.t()).numpy(), (m @ m.t()).numpy())
    assert m.new_zeros(4, 1).shape == (4, 1) and m.new_ones((2,), dtype=fg.int64).dtype == fg.int64
    t = fg.ones(3)
    assert t.zero_() is t and t.tolist() == [0, 0, 0]
    t.fill_(2.5).add_(1).mul_(2).sub_(1).div_(2)
    assert t.tolist() == [3.0, 3.0, 3.0]
    t.copy_(fg.tensor([1.0, -5.0, 9.0])).clamp_(min=0, max=4)
    assert t.tolist() == [1.0, 0.0, 4.0]
    w = fg.zeros(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        w.add_(1)  # a trainable leaf changes in place only under no_grad, as in PyTorch
    with fg.no_grad():
        w.add_(1)
    assert w.tolist() == [1.0, 1.0] and w.requires_grad


def test_pytorchs_creation_functions_and_parameter():
    x = fg.randn(2, 3, dtype=fg.float64)
    assert fg.zeros_like(x).dtype == fg.float64 and fg.ones_like(x).sum().item() == 6
    assert fg.randn_like(x).shape == (2, 3) and fg.rand_like(x, dtype=fg.float32).dtype == fg.float32
    fg.manual_seed(3)
    r = fg.randint(2, 5, (1000,))
    assert r.dtype == fg.int64 and r.min().item() == 2 and r.max().item() == 4
    fg.manual_seed(3)
    assert fg.randint(2, 5, (1000,)).tolist() == r.tolist()  # the seed fixes the draws
    assert sorted(fg.randperm(10).tolist()) == list(range(10)) and fg.randint(3, (2, 2)).max().item() < 3
    close(fg.eye(3).numpy(), np.eye(3))
    assert fg.is_tensor(x) and not fg.is_tensor(x.numpy())
    assert fg.as_tensor(x) is x and fg.as_tensor([1, 2]).dtype == fg.int64

    class Scale(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(fg.ones(2))

    assert [n for n, _ in Scale().named_parameters()] == ["s"] and Scale().s.requires_grad


def test_in_place_methods_reach_grad_data_and_buffers_as_in_pytorch():
    w = fg.ones(3, requires_grad=True)
    (w * w).sum().backward()
    w.grad.zero_()  # the old idiom: clears the accumulated gradient itself
    (w * 3).sum().backward()
    assert w.grad.tolist() == [3.0, 3.0, 3.0]
    lin = nn.Linear(2, 2)
    lin.bias.data.zero_()  # custom initialisation through .data, with gradients recorded
    lin.weight.data.copy_(fg.ones(2, 2))
    assert lin.bias.tolist() == [0.0, 0.0] and lin.weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    bn = nn.BatchNorm1d(2)
    bn.running_mean.fill_(3.0)
    for b in bn.buffers():
        if b.dtype.is_floating_point:
            b.mul_(2)
    assert bn.state_dict()["running_mean"].tolist() == [6.0, 6.0] and bn.running_var.tolist() == [2.0, 2.0]
    # what PyTorch refuses: a result that does not fit the tensor's dtype or shape
    for bad in (
        lambda: (fg.tensor([1, 2]) > 1).add_(1),
        lambda: fg.tensor([1, 2]).add_(0.5),
        lambda: fg.ones(2).add_(fg.ones(3, 2)),
    ):
        with pytest.raises(RuntimeError):
            bad()
    t = fg.ones(2)
    t.add_(fg.tensor([1.0, 2.0], dtype=fg.float64))
    assert t.dtype == fg.float32 and t.tolist() == [2.0, 3.0]


def test_in_place_updates_of_views_reach_the_tensor_they_were_taken_from():
    x = fg.tensor(np.arange(6.0).reshape(2, 3))
    x[0].mul_(10)
    x[:, 1].zero_()
    x.t()[2].add_(1)  # column 2
    x.view(3, 2)[0].fill_(7)  # a view of a view: x's first two elements
    x.narrow(1, 1, 2).sub_(1)
    assert x.tolist() == [[7.0, 6.0, 20.0], [3.0, -1.0, 5.0]]
    first, second = x.split(1, dim=0)
    second.mul_(2)
    x.unsqueeze(0).squeeze(0).permute(1, 0)[0].neg_()
    x.select(1, 2).add_(100)
    x.T[1].clamp_(min=0)
    x.flatten()[-1].copy_(fg.tensor(9.0))
    x.reshape(3, 2).chunk(3)[1].div_(2)
    assert x.tolist() == [[-7.0, 6.0, 60.0], [-3.0, 0.0, 9.0]]
    # what PyTorch copies: a list, a tensor or a mask as the index, a reshape of elements out
    # of order
    before = x.tolist()
    x[[0, 1]].zero_()
    x[:, x[0] > 0].zero_()
    x.t().reshape(6).zero_()
    assert x.tolist() == before
    # a trainable leaf: through its views under no_grad, refused (and unchanged) otherwise
    w = fg.ones(2, 3, requires_grad=True)
    with fg.no_grad():
        w[0].zero_()
        w.t()[2].fill_(5)
    assert w.tolist() == [[0.0, 0.0, 5.0], [1.0, 1.0, 5.0]] and w.requires_grad
    with pytest.raises(RuntimeError, match="leaf"):
        w[1].add_(1)
    assert w.tolist() == [[0.0, 0.0, 5.0], [1.0, 1.0, 5.0]]
    lin = nn.Linear(3, 2)
    lin.weight.data[:, 0].fill_(0.5)
    assert lin.weight[:, 0].tolist() == [0.5, 0.5]
    # a view between the tensor and the view updated takes the new values too
    x = fg.tensor(np.arange(6.0).reshape(2, 3))
    row = x[0]
    row[1:].zero_()
    assert row.tolist() == [0.0, 0.0, 0.0] and x.tolist() == [[0.0, 0.0, 0.0], [3.0, 4.0, 5.0]]
    # a view of a trainable leaf updated under no_grad stays in its graph, as PyTorch's
    w = fg.ones(2, 3, requires_grad=True)
    r = w[0]
    with fg.no_grad():
        r.mul_(3)
    (r * 2).sum().backward()
    assert r.requires_grad and w.grad.tolist() == [[2.0, 2.0, 2.0], [0.0, 0.0, 0.0]]
    # a view made trainable is a leaf of its own: refused while gradients are recorded
    x = fg.zeros(2, 3)
    v = x[0]
    v.requires_grad_()
    with pytest.raises(RuntimeError, match="leaf"):
        v.add_(1)
    assert x.tolist() == [[0.0] * 3] * 2 and v.is_leaf
    # the key is read when the view is made (an index tensor changed later does not move it)
    x = fg.zeros(4)
    i = fg.tensor(1)
    v = x[i]
    i += 1
    v.fill_(7)
    assert x.tolist() == [0.0, 7.0, 0.0, 0.0]
    # reshape and flatten give views where the places of the elements allow one, as PyTorch's
    x = fg.tensor(np.arange(6.0).reshape(2, 3))
    x[:, 1].reshape(2, 1).add_(100)
    x.t().reshape(1, 3, 2)[0, 0].zero_()
    x[:, 1:].flatten()[0].fill_(-1)  # a copy: those elements are not one run
    assert x.tolist() == [[0.0, 101.0, 2.0], [0.0, 104.0, 5.0]]
    y = fg.tensor(np.arange(12.0).reshape(4, 3))
    y[::2].reshape(6).add_(100)  # a step slice's elements are not the rows' run: a copy
    assert y.tolist() == np.arange(12.0).reshape(4, 3).tolist()
    # a single True or False as the index is refused (PyTorch adds an axis), not read as 1 or 0
    for key in (True, False, fg.tensor(True)):
        with pytest.raises(IndexError, match="True or False"):
            x[key]
    # a view reads its base's values as they are now, as a PyTorch view reads its storage
    x = fg.tensor(np.arange(6.0).reshape(2, 3))
    a, b = x[0], x[0]
    x.add_(10)
    assert a.tolist() == [10.0, 11.0, 12.0]
    a.mul_(2)
    assert x[0].tolist() == [20.0, 22.0, 24.0] and b.tolist() == [20.0, 22.0, 24.0]
    b.zero_()
    assert a.tolist() == [0.0, 0.0, 0.0] and x.tolist() == [[0.0] * 3, [13.0, 14.0, 15.0]]
    w = fg.ones(2, 2, requires_grad=True)
    row = w[0]
    opt = fg.optim.SGD([w], lr=0.5)
    (w * w).sum().backward()
    opt.step()
    assert row.tolist() == [0.0, 0.0] and row.requires_grad
    # a view is in the graph when its base comes to be, as PyTorch's
    x = fg.zeros(3)
    a = x[0:2]
    w = fg.ones(3, requires_grad=True)
    x.add_(w)
    assert a.requires_grad
    a.sum().backward()
    assert w.grad.tolist() == [1.0, 1.0, 0.0]
    # a long chain of views of views
    x = fg.ones(4)
    y = x
    for _ in range(100_000):
        y = y[:]
    y[1:].zero_()
    assert x.tolist() == [1.0, 0.0, 0.0, 0.0]
    # the gradient sees the update, as PyTorch's: y[0] tripled
    x = fg.ones(2, 3, requires_grad=True)
    y = x * 2
    y[0].mul_(3)
    y.sum().backward()
    assert x.grad.tolist() == [[6.0, 6.0, 6.0], [2.0, 2.0, 2.0]]


def test_remainder_has_pytorchs_derivative_and_floor_division_none():
    x = fg.tensor([5.5, -3.0], requires_grad=True)
    y = fg.tensor([2.0, 2.0], requires_grad=True)
    (x % y).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0] and y.grad.tolist() == [-2.0, 2.0]  # -floor(x / y)
    with pytest.raises(ValueError, match="floor"):
        (x // y).sum().backward()


def test_model_trains_a_sequential_and_modules_take_pytorchs_forms():
    fg.manual_seed(0)
    seq = nn.Sequential(nn.Linear(2, 8), nn.Tanh(), nn.Linear(8, 1))
    model = fg.Model(seq, nn.MSELoss(), fg.optim.Adam(lr=0.05))
    x = fg.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    y = fg.tensor([[0.0], [1.0], [1.0], [0.0]])
    first = None
    for _ in range(200):
        loss, grads = model.backward(model.forward(x), y)
        model.apply_grads(grads)
        first = loss if first is None else first
    assert loss < 0.5 * first
    assert fg.randint(10, size=(4,)).shape == (4,) and fg.randint(3, 5, size=(2,)).min().item() >= 3
    # PyTorch's implicit softmax axis: 0 for 0-, 1- and 3-d input, 1 otherwise
    x3 = fg.randn(2, 3, 4)
    close(nn.Softmax()(x3).numpy(), F.softmax(x3, dim=0).numpy())


def test_what_grad_data_and_buffers_hand_out_reads_and_writes_the_storage():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    d = w.data
    opt = fg.optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    g = w.grad
    (w * w).sum().backward()  # accumulates: g sees it, as a view of the same storage would
    assert g.tolist() == [4.0, 8.0]
    opt.step()
    d.add_(100)  # the value after the step, not a stale copy
    close(w.numpy(), [100.6, 101.2], rtol=1e-6)
    opt.zero_grad()
    g.zero_()  # no longer w's gradient: w.grad stays None
    assert w.grad is None
    w.grad = fg.ones(2)
    w.grad.data.zero_()  # one level down still writes through
    assert w.grad.tolist() == [0.0, 0.0]
    bn = nn.BatchNorm1d(2)
    rm = bn.running_mean
    bn(fg.tensor([[1.0, 2.0], [3.0, 4.0]]))
    rm.mul_(1.0)
    close(bn.running_mean.numpy(), [0.2, 0.3], rtol=1e-6)
    mask = fg.tensor([1.0, -1.0]) > 0
    assert mask.zero_().tolist() == [False, False] and mask.fill_(1).tolist() == [True, True]
    with pytest.raises(RuntimeError):
        fg.tensor([1, 2]).fill_(float("nan"))
    # a gradient built with create_graph stays differentiable through in-place updates
    v = fg.tensor([1.0, 2.0], requires_grad=True)
    (v**3).sum().backward(create_graph=True)
    v.grad.mul_(2)
    (dv2,) = fg.grad(v.grad.sum(), [v])
    assert dv2.tolist() == [12.0, 24.0]


def test_floor_division_and_remainder_on_tracked_tensors_and_big_integers():
    x = fg.tensor([3.0, -3.0], requires_grad=True)
    assert (x % 2).tolist() == [1.0, 1.0] and (x // 2).tolist() == [1.0, -2.0]
    y = fg.tensor([0.1], dtype=fg.float64, requires_grad=True)
    one = fg.tensor([1.0], dtype=fg.float64, requires_grad=True)
    (one % y).sum().backward()
    assert y.grad.tolist() == [-9.0] and one.grad.tolist() == [1.0]  # numpy's quotient, 9
    assert (fg.tensor([5.0]) // fg.tensor([2.0], dtype=fg.float64)).dtype == fg.float64
    big = fg.tensor([2**60 + 1, -(2**60 + 1), 7])
    assert (big // (2**60 + 1)).tolist() == [1, -1, 0] and (big % (2**60 + 3)).tolist() == [2**60 + 1, 2, 7]


def test_clamp_takes_tensor_and_crossed_bounds_and_softmax_its_implicit_axis():
    a = fg.tensor([1, 2, 3])
    assert a.clamp(min=fg.tensor(1.5)).tolist() == [1.5, 2.0, 3.0]
    assert a.clamp(fg.tensor([2, 0, 0]), fg.tensor([5, 5, 2])).tolist() == [2, 2, 2]
    assert a.clamp(2, 1).tolist() == [1, 1, 1]  # min(max(x, 2), 1), as PyTorch
    x = fg.ones(2, 3, 4)
    assert F.softmax(x).sum().item() == pytest.approx(12.0) and nn.Softmax()(fg.tensor(3.0)).item() == 1.0
    seq = nn.ModuleList([nn.Linear(1, 1), nn.ReLU(), nn.Tanh()])
    assert isinstance(seq.pop(1), nn.ReLU) and [type(m).__name__ for m in seq] == ["Linear", "Tanh"]
    del seq[0]
    assert [n for n, _ in seq.named_children()] == ["0"]
    assert fg.randint(high=5, size=(3,)).max().item() < 5


def test_functional_linear_with_and_without_bias_and_its_gradients():
    rng = np.random.default_rng(3)
    xv, wv, bv = rng.normal(size=(2, 3, 4)), rng.normal(size=(5, 4)), rng.normal(size=5)
    x = fg.tensor(xv, requires_grad=True)
    w = fg.tensor(wv, requires_grad=True)
    b = fg.tensor(bv, requires_grad=True)
    y = F.linear(x, w, b)
    np.testing.assert_allclose(y.numpy(), xv @ wv.T + bv, rtol=1e-12)
    np.testing.assert_allclose(F.linear(x, w).numpy(), xv @ wv.T, rtol=1e-12)
    (y * y).sum().backward()
    up = 2 * (xv @ wv.T + bv)
    np.testing.assert_allclose(x.grad.numpy(), up @ wv, rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), up.reshape(-1, 5).T @ xv.reshape(-1, 4), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), up.reshape(-1, 5).sum(0), rtol=1e-12)
    with pytest.raises(Exception, match="linear"):
        F.linear(x, fg.tensor(wv.T))
    # Biases that broadcast, as PyTorch takes them; a bias tensor keeps its dtype.
    for bias in (0.5, fg.tensor([0.5]), fg.tensor(np.full((1, 5), 0.5))):
        np.testing.assert_allclose(F.linear(x, w, bias).numpy(), xv @ wv.T + 0.5, rtol=1e-12)
    x32 = fg.tensor(xv.astype(np.float32))
    assert F.linear(x32, w.detach(), b.detach()).dtype == fg.float64
    assert F.linear(x32, w.detach()).dtype == fg.float32


def test_deepcopy_of_a_model_its_state_dict_and_tensors_as_in_pytorch():
    """`copy.deepcopy(model)` (a target network, the best model so far) and
    `copy.deepcopy(model.state_dict())`: the same values, modes and gradients in parameters of
    their own."""

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten())
            self.rnn = nn.GRU(4, 3, batch_first=True)
            self.net = nn.Net([nn.Linear(3, 3), nn.GELU(approximate="tanh"), nn.Dropout(0.5)])
            self.scale = fg.tensor(2.0, requires_grad=True)
            self.register_buffer("seen", fg.zeros(1))

        def forward(self, img, seq):
            h = self.body(img).sum() * self.scale
            out, _ = self.rnn(seq)
            return self.net(out) + h

    fg.manual_seed(0)
    model = Agent()
    img, seq = fg.randn(2, 1, 4, 4), fg.randn(2, 5, 4)
    model(img, seq).sum().backward()
    model.net.eval()
    target = copy.deepcopy(model)
    assert type(target) is Agent and target.training and not target.net.training
    assert repr(target) == repr(model)
    pairs = list(zip(model.named_parameters(), target.named_parameters()))
    assert pairs and all(n == m and p is not q for (n, p), (m, q) in pairs)
    for (n, p), (_, q) in pairs:
        np.testing.assert_array_equal(q.detach().numpy(), p.detach().numpy(), err_msg=n)
        np.testing.assert_array_equal(q.grad.numpy(), p.grad.numpy(), err_msg=n)
    model.eval(), target.eval()
    np.testing.assert_array_equal(target(img, seq).numpy(), model(img, seq).numpy())
    # Stepping the copy leaves the original alone, and the optimizer sees two parameter sets.
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    best = copy.deepcopy(model.state_dict())
    opt = fg.optim.SGD(list(model.parameters()) + list(target.parameters()), lr=0.5)
    target.zero_grad()
    opt.step()
    for k, v in model.state_dict().items():
        assert not np.array_equal(v.numpy(), before[k]) or k.endswith(
            ("running_mean", "running_var", "num_batches_tracked", "seen")
        ), k
        np.testing.assert_array_equal(best[k].numpy(), before[k], err_msg=k)
    model.load_state_dict(best)
    np.testing.assert_array_equal(model(img, seq).numpy(), target(img, seq).numpy())
    # Tensors: a leaf becomes a leaf of its own; a computed one is refused, as PyTorch's.
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    w2 = copy.deepcopy(w)
    assert w2.requires_grad and w2 is not w and w2.tolist() == [1.0, 2.0]
    (w * w2).sum().backward()
    assert w.grad.tolist() == [1.0, 2.0] and w2.grad.tolist() == [1.0, 2.0]
    with pytest.raises(RuntimeError, match="leaves"):
        copy.deepcopy(w * 2)
    assert copy.deepcopy(fg.tensor([1, 2]) > 1).dtype == fg.bool


def test_deepcopy_keeps_tied_weights_tied():
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, ids):
            return self.head(self.tok(ids))

    lm = LM()
    twin = copy.deepcopy(lm)
    assert twin.head.weight is twin.tok.weight and twin.tok.weight is not lm.tok.weight
    assert len(list(twin.parameters())) == 1
    ids = fg.tensor(np.array([1, 2, 3]))
    np.testing.assert_array_equal(twin(ids).numpy(), lm(ids).numpy())


@pytest.mark.parametrize(
    "cls,kwargs,want",
    [
        (
            fg.optim.Adam,
            {},
            [0.500000005, 0.048778214191592284, -0.27065920667453525, -0.45127728538111, -0.5133505264097651],
        ),
        (
            fg.optim.AdamW,
            {"weight_decay": 0.1},
            [0.45000000499999987, -0.007606722158518486, -0.301918481757861, -0.4430515900902796, -0.4656321399012202],
        ),
    ],
)
def test_amsgrad_steps_as_pytorchs(cls, kwargs, want):
    # torch.optim.Adam / AdamW(lr=0.5, betas=(0.9, 0.5), amsgrad=True), float64, on x²/2 from 1.
    x = fg.tensor([1.0], dtype=fg.float64, requires_grad=True)
    opt = cls([x], lr=0.5, betas=(0.9, 0.5), amsgrad=True, **kwargs)
    got = []
    for _ in range(5):
        opt.zero_grad()
        (0.5 * x * x).sum().backward()
        opt.step()
        got.append(x.item())
    close(got, want)


def test_optimizer_state_dict_round_trips_through_pickle_as_pytorchs():
    import pickle

    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    decay = [p for n, p in model.named_parameters() if n.endswith("weight")]
    other = [p for n, p in model.named_parameters() if n.endswith("bias")]
    groups = lambda m: [  # noqa: E731
        {"params": [p for n, p in m.named_parameters() if n.endswith("weight")], "weight_decay": 0.1},
        {"params": [p for n, p in m.named_parameters() if n.endswith("bias")], "lr": 0.05},
    ]
    assert len(decay) == len(other) == 2
    opt = fg.optim.AdamW(groups(model), lr=0.01, amsgrad=True)
    x, y = fg.randn(8, 3), fg.randn(8, 1)

    def step(m, o):
        o.zero_grad()
        F.mse_loss(m(x), y).backward()
        o.step()

    for _ in range(3):
        step(model, opt)
    sd = opt.state_dict()
    # PyTorch's layout: parameters numbered across the groups, a step count per parameter.
    assert sorted(sd["state"]) == [0, 1, 2, 3]
    assert sorted(sd["state"][0]) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"]
    assert sd["state"][2]["step"].item() == 3.0
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2, 3]]
    assert sd["param_groups"][0]["weight_decay"] == 0.1 and sd["param_groups"][1]["lr"] == 0.05
    # A checkpoint of both (pickled, as torch.save does), resumed into fresh objects, steps alike.
    saved = pickle.loads(pickle.dumps({"model": model.state_dict(), "optimizer": sd}))
    twin = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    twin.load_state_dict(saved["model"])
    twin_opt = fg.optim.AdamW(groups(twin), lr=0.5, amsgrad=True)
    twin_opt.load_state_dict(saved["optimizer"])
    assert twin_opt.param_groups[1]["lr"] == 0.05
    for _ in range(2):
        step(model, opt)
        step(twin, twin_opt)
    for (n, a), (_, b) in zip(model.named_parameters(), twin.named_parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy(), err_msg=n)
    # The state is a snapshot; a mismatch changes nothing.
    assert sd["state"][2]["step"].item() == 3.0
    before = twin_opt.state_dict()
    bad = opt.state_dict()
    bad["state"][1]["exp_avg"] = fg.zeros(7)
    with pytest.raises(ValueError, match="1.exp_avg"):
        twin_opt.load_state_dict(bad)
    with pytest.raises(ValueError, match="parameter groups"):
        twin_opt.load_state_dict({"state": {}, "param_groups": bad["param_groups"][:1]})
    after = twin_opt.state_dict()
    np.testing.assert_array_equal(after["state"][1]["exp_avg"].numpy(), before["state"][1]["exp_avg"].numpy())
    # Momentum SGD's buffer under PyTorch's name.
    sgd = fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step(model, sgd)
    assert sorted(sgd.state_dict()["state"][0]) == ["momentum_buffer", "step"]


def test_masked_fill_keeps_integer_and_boolean_tensors_as_pytorchs():
    t = fg.tensor([1, 2, 3])
    filled = t.masked_fill(t > 1, 7)
    assert filled.dtype == fg.int64 and filled.tolist() == [1, 7, 7]
    assert t.masked_fill(t > 1, 2.7).tolist() == [1, 2, 2]  # cast, as PyTorch's
    flags = (t > 1).masked_fill(t == 1, 5)
    assert flags.dtype == fg.bool and flags.tolist() == [True, True, True]
    with pytest.raises(ValueError, match="integer"):
        t.masked_fill(t > 1, float("-inf"))


def test_a_one_element_index_tensor_keeps_its_axis_and_nan_propagates():
    x = fg.arange(12).reshape(3, 4)
    assert x[fg.tensor([0])].shape == (1, 4) and x[:, fg.tensor([2])].shape == (3, 1)
    assert fg.arange(10)[fg.tensor([3])].shape == (1,) and x[np.array([1])].shape == (1, 4)
    assert x[fg.tensor(1)].shape == (4,) and x[np.int64(1)].shape == (4,)
    v = fg.tensor([float("nan"), 1.0])
    assert np.isnan(v.clamp(0, 0.5).numpy()[0]) and np.isnan(F.relu(v).numpy()[0])
    assert np.isnan(fg.maximum(v, fg.tensor([0.0, 0.0])).numpy()[0])


def test_op_errors_are_runtime_errors_as_pytorchs():
    with pytest.raises(RuntimeError, match="inner dimensions"):
        fg.ones(2, 3) @ fg.ones(2, 3)
    with pytest.raises(ValueError):
        fg.ones(2, 3) + fg.ones(4, 5)
    with pytest.raises(fg.OpError):
        nn.Linear(4, 2).load_state_dict({"weight": fg.zeros(3, 4), "bias": fg.zeros(2)})


def test_max_min_freezing_parameter_checks_and_add_with_alpha_as_pytorchs():
    x = fg.tensor([[1.0, 5.0, 3.0], [4.0, 2.0, 6.0]])
    _, pred = fg.max(x, 1)
    assert pred.tolist() == [1, 2] and x.max(dim=1).values.tolist() == [5.0, 6.0]
    assert fg.max(x).item() == 6.0 and fg.min(x, 0).indices.tolist() == [0, 1, 0]
    assert fg.max(x, fg.full((2, 3), 4.5)).tolist() == [[4.5, 5.0, 4.5], [4.5, 4.5, 6.0]]
    assert type(x.min(1)).__name__ == "min" and type(x.min(1)).__module__ == "ferrograd.return_types"
    layer = nn.Linear(2, 2)
    layer.weight.requires_grad = False
    assert not layer.weight.requires_grad and layer.bias.requires_grad
    assert isinstance(layer.weight, nn.Parameter) and not isinstance(fg.ones(2), nn.Parameter)
    assert isinstance(nn.Parameter(fg.ones(2)), nn.Parameter)
    ema, q = fg.ones(2, requires_grad=True), fg.full((2,), 3.0)
    with fg.no_grad():
        ema.mul_(0.9).add_(q, alpha=0.1)
    close(ema.detach().numpy(), [1.2, 1.2], rtol=1e-6)
    assert fg.ones(2).add(q, alpha=2).tolist() == [7.0, 7.0] and fg.ones(2).sub(q, alpha=0.5).tolist() == [-0.5, -0.5]


def test_save_and_load_take_any_checkpoint_and_file_objects_as_torchs(tmp_path):
    import io
    import pickle

    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
    opt = fg.optim.Adam(model.parameters(), lr=0.01)
    model(fg.randn(4, 3)).sum().backward()
    opt.step()
    checkpoint = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3, "losses": [0.5, 0.25]}
    fg.save(checkpoint, tmp_path / "ckpt.pt")
    back = fg.load(tmp_path / "ckpt.pt")
    assert back["epoch"] == 3 and back["losses"] == [0.5, 0.25]
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(back["model"][k].numpy(), v.numpy())
    assert back["optimizer"]["state"][0]["exp_avg"].shape == (2, 3)
    # A file object, a single tensor, a list.
    buf = io.BytesIO()
    fg.save([fg.ones(2), fg.tensor([1, 2]) > 1], buf)
    buf.seek(0)
    ones, flags = fg.load(buf)
    assert ones.tolist() == [1.0, 1.0] and flags.dtype == fg.bool
    fg.save(fg.arange(3), tmp_path / "t.pt")
    assert fg.load(tmp_path / "t.pt").tolist() == [0, 1, 2]
    # A flat state dict is still safetensors, which PyTorch's safetensors reads.
    fg.save(model.state_dict(), tmp_path / "sd.safetensors")
    assert (tmp_path / "sd.safetensors").read_bytes()[8:9] == b"{"
    assert sorted(fg.load(tmp_path / "sd.safetensors")) == sorted(model.state_dict())
    # weights_only refuses a pickle that would run code, before running it.
    (tmp_path / "evil.pt").write_bytes(pickle.dumps(collections.Counter("ab")))
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        fg.load(tmp_path / "evil.pt")
    assert fg.load(tmp_path / "evil.pt", weights_only=False) == collections.Counter("ab")


def test_device_boilerplate_of_pytorch_scripts_runs_on_the_cpu():
    import ferrograd.cuda

    device = "cuda" if fg.cuda.is_available() else "cpu"
    assert device == "cpu" and not ferrograd.cuda.is_available() and not fg.backends.mps.is_available()
    fg.backends.cudnn.benchmark = True
    idx = fg.zeros(2, 5, dtype=fg.int64)
    pos = fg.arange(0, 5, dtype=fg.long, device=idx.device)
    assert pos.tolist() == [0, 1, 2, 3, 4] and idx.device == "cpu" and idx.device.type == "cpu"
    assert str(fg.device("cpu:0")) == "cpu:0" and fg.device("cpu") == idx.device
    for make in (
        lambda d: fg.zeros(2, device=d),
        lambda d: fg.randn(2, 2, device=d),
        lambda d: fg.tensor([1.0], device=d),
        lambda d: fg.ones_like(pos, device=d),
        lambda d: fg.eye(2, device=d),
        lambda d: fg.randint(0, 3, (2,), device=d),
    ):
        assert make(fg.device("cpu")).shape[0] >= 1
        with pytest.raises(ValueError, match="CPU only"):
            make("cuda")
    model = nn.Linear(2, 2).to(fg.device(device))
    assert model(fg.ones(1, 2, device=device)).shape == (1, 2)


def test_assignment_into_a_tensor_as_pytorchs():
    logits = fg.tensor([[0.5, 3.0, -1.0, 2.0]])
    v, _ = fg.topk(logits, 2)
    logits[logits < v[:, [-1]]] = -float("Inf")  # nanoGPT's top-k sampling
    assert logits.tolist() == [[-float("inf"), 3.0, -float("inf"), 2.0]]
    x = fg.arange(12).reshape(3, 4)
    x[:, 1] = 5
    x[1:, 2:] += 1
    assert x.dtype == fg.int64 and x.tolist() == [[0, 5, 2, 3], [4, 5, 7, 8], [8, 5, 11, 12]]
    # Differentiable in what stays and in the value written.
    w = fg.ones(3, requires_grad=True)
    y = w * 2
    y[1] = w[0] * 10
    y.sum().backward()
    assert w.grad.tolist() == [12.0, 0.0, 2.0]
    # A parameter only under no_grad, as in PyTorch.
    p = fg.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        p[0] = 2.0
    with fg.no_grad():
        p[0] = 2.0
    assert p.tolist() == [2.0, 1.0, 1.0] and p.requires_grad
    a = fg.zeros(4)
    a[[1, 1, 2]] = fg.tensor([1.0, 2.0, 3.0])  # the last write to a position stays
    assert a.tolist() == [0.0, 2.0, 3.0, 0.0]


def test_views_fill_and_loading_take_pytorchs_forms():
    x = fg.ones(2, 1)
    assert x.expand(-1, 4).shape == (2, 4) and x.expand(3, 2, 4).shape == (3, 2, 4)
    assert x.squeeze(0).shape == (2, 1) and x.squeeze(1).shape == (2,)  # a longer axis stays
    assert fg.ones(1, 2, 1).squeeze((0, 2)).shape == (2,)
    assert fg.full((2,), 1).dtype == fg.int64 and fg.full((2,), True).dtype == fg.bool
    assert fg.full((2,), 1.5).dtype == fg.float32 and fg.Tensor([1, 2]).dtype == fg.float32
    layer = nn.Linear(4, 2)
    keys = layer.load_state_dict({"weight": fg.ones(2, 4, dtype=fg.float64)}, strict=False)
    assert keys.missing_keys == ["bias"] and keys.unexpected_keys == []
    assert layer.weight.dtype == fg.float32 and layer.weight.tolist()[0] == [1.0] * 4
    with pytest.raises(RuntimeError, match="bias: missing"):
        layer.load_state_dict({"weight": fg.ones(2, 4)})


def test_pytorchs_rearrangements_statistics_and_smaller_methods():
    a = np.sin(np.arange(24.0)).reshape(2, 3, 4)
    x = fg.tensor(a)
    idx = np.array([[[2, 0, 1, 1]], [[0, 0, 2, 1]]])
    np.testing.assert_array_equal(x.gather(1, fg.tensor(idx)).numpy(), np.take_along_axis(a, idx, 1))
    np.testing.assert_array_equal(x.flip(0, 2).numpy(), a[::-1, :, ::-1])
    np.testing.assert_array_equal(fg.flip(x, [1]).numpy(), a[:, ::-1])
    np.testing.assert_array_equal(x.roll(2, 2).numpy(), np.roll(a, 2, 2))
    np.testing.assert_array_equal(x.roll((1, -1), (0, 1)).numpy(), np.roll(a, (1, -1), (0, 1)))
    np.testing.assert_array_equal(x.roll(5).numpy(), np.roll(a, 5))
    np.testing.assert_array_equal(x.repeat(2, 1, 3).numpy(), np.tile(a, (2, 1, 3)))
    close(x.var(1).numpy(), a.var(1, ddof=1))
    close(x.std(dim=(0, 2), unbiased=False, keepdim=True).numpy(), a.std((0, 2), keepdims=True))
    close(x.var(correction=0).item(), a.var())
    close(x.logsumexp(-1).numpy(), np.log(np.exp(a).sum(-1)))
    values, indices = x.sort(dim=1, descending=True)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(-a, 1, kind="stable"))
    np.testing.assert_array_equal(values.numpy(), -np.sort(-a, 1))
    np.testing.assert_array_equal(fg.argsort(x[0, 0]).numpy(), np.argsort(a[0, 0]))
    close(x.abs().rsqrt().numpy()[1], 1 / np.sqrt(np.abs(a[1])))
    close(x[1].abs().log2().numpy(), np.log2(np.abs(a[1])))
    assert [t.shape for t in x.unbind(1)] == [(2, 4)] * 3 and x.select(2, -1).shape == (2, 3)
    assert x.unflatten(2, (2, -1)).shape == (2, 3, 2, 2) and x.mT.shape == (2, 4, 3)
    assert fg.ones(1, 4).expand_as(x).shape == (2, 3, 4) and x.nelement() == 24
    assert x.is_floating_point() and not fg.arange(3).is_floating_point()
    m = fg.tensor([[1, 0, 2], [0, 3, 0]])
    assert m.nonzero().tolist() == [[0, 0], [0, 2], [1, 1]]
    assert [t.tolist() for t in m.nonzero(as_tuple=True)] == [[0, 0, 1], [0, 2, 1]]
    assert m.masked_select(m > 0).tolist() == [1, 2, 3]
    u, inv, counts = m.unique(return_inverse=True, return_counts=True)
    assert u.tolist() == [0, 1, 2, 3] and inv.tolist() == [[1, 0, 2], [0, 3, 0]] and counts.tolist() == [3, 1, 1, 1]
    assert fg.tensor([1, 2]).repeat_interleave(2).tolist() == [1, 1, 2, 2]
    assert m.equal(fg.tensor([[1, 0, 2], [0, 3, 0]])) and not m.equal(m[:1])
    assert m.new_full((2,), 7).tolist() == [7, 7] and x.new_tensor([1.0]).dtype == fg.float64
    # Derivatives through the compositions, to second order.
    w = fg.tensor(a[0], requires_grad=True)
    assert fg.gradcheck(
        lambda t: t.gather(0, fg.tensor([[1, 0, 2, 2]])).sum() + t.logsumexp(1).sum() + t.std(), [w], second_order=True
    )
    assert fg.gradcheck(lambda t: (t.sort(1).values * fg.arange(4).double()).sum() + t.roll(1, 0).flip(1)[0].sum(), [w])


def test_step_with_a_closure_and_activation_checkpointing_as_pytorchs():
    from ferrograd.utils.checkpoint import checkpoint

    fg.manual_seed(0)
    block = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))
    x = fg.randn(3, 4, requires_grad=True)
    checkpoint(block, x, use_reentrant=False).pow(2).sum().backward()
    kept = [p.grad.numpy().copy() for p in block.parameters()] + [x.grad.numpy().copy()]
    block.zero_grad()
    x.grad = None
    block(x).pow(2).sum().backward()
    for a, b in zip(kept, [p.grad.numpy() for p in block.parameters()] + [x.grad.numpy()]):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)

    def broken(t):
        raise KeyError("inside the block")

    with pytest.raises(KeyError, match="inside the block"):
        checkpoint(broken, x)
    # step(closure): the closure computes the loss and its gradients; the step follows.
    opt = fg.optim.SGD(block.parameters(), lr=0.1)
    before = block.state_dict()["0.weight"].numpy().copy()

    def closure():
        opt.zero_grad()
        loss = block(x).pow(2).sum()
        loss.backward()
        return loss

    with fg.no_grad():  # the closure records its gradients all the same, as in PyTorch
        loss = opt.step(closure)
        assert not fg.is_grad_enabled()
    assert loss.item() > 0 and not np.array_equal(block.state_dict()["0.weight"].numpy(), before)


def test_more_of_pytorchs_layers_and_functions():
    x = fg.randn(1, 2, 3, 3)
    assert nn.AdaptiveAvgPool2d(1)(x).shape == (1, 2, 1, 1)
    np.testing.assert_array_equal(nn.Upsample(scale_factor=2)(x).numpy(), x.numpy().repeat(2, 2).repeat(2, 3))
    assert F.interpolate(x, size=(6, 6)).shape == (1, 2, 6, 6) and repr(nn.Upsample(scale_factor=2)).startswith(
        "Upsample("
    )
    with pytest.raises(NotImplementedError, match="bilinear"):
        F.interpolate(x, scale_factor=2, mode="bilinear")
    assert nn.Unflatten(1, (2, 1))(fg.ones(3, 2)).shape == (3, 2, 1) and nn.ReLU6()(
        fg.tensor([-1.0, 7.0])
    ).tolist() == [0.0, 6.0]

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([fg.ones(2), fg.zeros(3)])
            self.named = nn.ParameterDict({"a": fg.ones(2)})

    holder = Holder()
    assert [n for n, _ in holder.named_parameters()] == ["scales.0", "scales.1", "named.a"]
    assert len(holder.scales) == 2 and "a" in holder.named and isinstance(holder.scales[1], nn.Parameter)
    # kl_div: PyTorch 2.15's values for these inputs (a zero target included).
    p = F.log_softmax(fg.tensor(np.sin(np.arange(20.0)).reshape(4, 5)), -1)
    q = F.softmax(fg.tensor(np.cos(np.arange(20.0)).reshape(4, 5)), -1).numpy().copy()
    q[0, 0] = 0
    q = fg.tensor(q)
    got = [F.kl_div(p, q, reduction=r).item() for r in ("batchmean", "sum", "mean")]
    close(got, [0.2718670855547817, 1.0874683422191267, 0.054373417110956335])
    close(nn.KLDivLoss(reduction="sum")(p, q).item(), 1.0874683422191267)
    # inference_mode, and the functions PyTorch has at its top level.
    with fg.inference_mode():
        assert not fg.is_grad_enabled()
    with fg.inference_mode(False):
        assert fg.is_grad_enabled()
    assert fg.inference_mode(lambda: fg.is_grad_enabled())() is False and fg.is_grad_enabled()
    assert [t.tolist() for t in fg.split(fg.arange(6), 4)] == [[0, 1, 2, 3], [4, 5]]
    assert (
        fg.numel(fg.ones(2, 3)) == 6 and fg.empty(2, 2).shape == (2, 2) and fg.dot(fg.ones(3), fg.ones(3)).item() == 3.0
    )
    assert fg.outer(fg.arange(2), fg.arange(3)).tolist() == [[0, 0, 0], [0, 1, 2]]
    inf, nan = float("inf"), float("nan")
    assert (
        fg.isclose(fg.tensor([1.0, inf, nan]), fg.tensor([1.0 + 1e-9, inf, nan]), equal_nan=True).tolist() == [True] * 3
    )


def test_booleans_and_big_integers_are_written_exactly():
    flags = fg.zeros(3) > 1
    flags[0] = True
    flags[flags] = False
    assert flags.dtype == fg.bool and flags.tolist() == [False] * 3
    big = fg.tensor([2**60 + 1, 7])
    big[1] = 1
    assert big.tolist() == [2**60 + 1, 1] and big.flip(0).tolist() == [1, 2**60 + 1]
    assert big.roll(1).tolist() == [1, 2**60 + 1] and big.masked_fill(big == 1, 0).tolist() == [2**60 + 1, 0]


def test_a_frozen_parameter_stays_frozen_through_pickling_and_parameter():
    import pickle

    p = fg.ones(2, requires_grad=True)
    p.requires_grad = False
    back = pickle.loads(pickle.dumps(p))
    assert back.is_parameter and not back.requires_grad
    assert isinstance(nn.Parameter(fg.ones(2), requires_grad=False), nn.Parameter)
    with pytest.raises(RuntimeError, match="leaf"):
        (fg.ones(2, requires_grad=True) * 2).requires_grad = False


def test_var_and_argsort_take_pytorchs_overloads():
    # var(False) is unbiased=False over everything, as PyTorch's overload.
    x = fg.tensor([[1.0, 2.0], [3.0, 5.0]])
    close(x.var(False).item(), 2.1875)
    close(x.var(correction=4).item(), float("inf"))
    # argsort as PyTorch's: NaN is the largest; booleans; 0-d.
    assert fg.tensor([3.0, float("nan"), 1.0]).argsort(descending=True).tolist() == [1, 0, 2]
    assert fg.tensor([True, False, True]).argsort(descending=True).tolist() == [0, 2, 1]
    assert fg.tensor(5.0).argsort().tolist() == 0


def test_load_keeps_the_allow_list_and_reads_file_objects():
    import io
    import pickle

    # weights_only=None keeps the allow-list; a file object holding safetensors loads.
    evil = io.BytesIO(pickle.dumps(collections.Counter("a")))
    with pytest.raises(pickle.UnpicklingError):
        fg.load(evil, weights_only=None)
    buf = io.BytesIO()
    buf.write(open(_saved_state_dict(), "rb").read())
    buf.seek(0)
    assert sorted(fg.load(buf)) == ["bias", "weight"]


def test_checkpoint_passes_other_arguments_and_wants_one_tensor_back():
    from ferrograd.utils.checkpoint import checkpoint

    lin = nn.Linear(2, 2)
    a = fg.ones(1, 2, requires_grad=True)
    assert checkpoint(lambda t, scale: lin(t) * scale, a, 3.0).shape == (1, 2)
    with pytest.raises(TypeError, match="one tensor"):
        checkpoint(lambda t: (lin(t), t), a)


def test_devices_dtypes_and_parameter_dicts_as_pytorchs():
    assert fg.device("cpu") != "cpu:x" and fg.tensor([True]).dtype == fg.bool and fg.Tensor([True]).dtype == fg.float32
    assert fg.full((2,), np.int64(3)).dtype == fg.int64
    with pytest.raises(KeyError, match="keys"):
        nn.ParameterDict({"keys": fg.ones(1)})
    with pytest.raises(fg.OpError):
        fg.dot(fg.ones(2, 2), fg.ones(2, 2))


def _saved_state_dict():
    import tempfile

    path = tempfile.mkdtemp() + "/sd.safetensors"
    fg.save(nn.Linear(2, 2).state_dict(), path)
    return path


def test_an_optimizer_load_that_does_not_fit_changes_nothing():
    w = fg.ones(3, requires_grad=True)
    opt = fg.optim.Adam([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    good = opt.state_dict()
    for bad_group, error in [
        ({"lr": "abc"}, TypeError),
        ({"lr": -1.0}, ValueError),
        ({"betas": (0.9, 1.5)}, ValueError),
    ]:
        bad = opt.state_dict()
        bad["param_groups"][0].update(bad_group)
        with pytest.raises(error):
            opt.load_state_dict(bad)
        assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["betas"] == (0.9, 0.999)
        np.testing.assert_array_equal(
            opt.state_dict()["state"][0]["exp_avg"].numpy(), good["state"][0]["exp_avg"].numpy()
        )
    with pytest.raises(TypeError, match="state"):
        opt.load_state_dict({"state": None, "param_groups": good["param_groups"]})
    opt.step()  # still steps


def test_pad_sequence_and_pretrained_embeddings_as_pytorchs():
    from ferrograd.nn.utils.rnn import pad_sequence

    a, b = fg.ones(3, 2, requires_grad=True), fg.full((1, 2), 2.0)
    padded = pad_sequence([a, b], batch_first=True, padding_value=-1.0)
    assert padded.shape == (2, 3, 2) and padded.tolist()[1] == [[2.0, 2.0], [-1.0, -1.0], [-1.0, -1.0]]
    assert pad_sequence([a, b]).shape == (3, 2, 2)
    assert pad_sequence([a, b], batch_first=True, padding_side="left").tolist()[1][2] == [2.0, 2.0]
    padded.sum().backward()
    assert a.grad.tolist() == [[1.0, 1.0]] * 3
    table = fg.tensor(np.arange(6.0).reshape(3, 2))
    frozen = nn.Embedding.from_pretrained(table)
    assert frozen.weight.dtype == fg.float64 and not frozen.weight.requires_grad
    assert frozen(fg.tensor([2])).tolist() == [[4.0, 5.0]]
    tuned = nn.Embedding.from_pretrained(table.float(), freeze=False, padding_idx=0)
    assert tuned.weight.requires_grad and tuned.weight.tolist()[0] == [0.0, 1.0]  # kept, as PyTorch's


def test_cumsum_as_pytorchs():
    a = np.sin(np.arange(1400.0)).reshape(2, 700)
    np.testing.assert_allclose(fg.tensor(a).cumsum(1).numpy(), np.cumsum(a, 1), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(fg.cumsum(fg.tensor(a), dim=0).numpy(), np.cumsum(a, 0), rtol=1e-12)
    ints = fg.tensor([[1, 2, 3], [4, 5, 6]])
    assert ints.cumsum(1).dtype == fg.int64 and ints.cumsum(1).tolist() == [[1, 3, 6], [4, 9, 15]]
    assert (ints > 2).cumsum(1).tolist() == [[0, 0, 1], [1, 2, 3]]
    assert ints.cumsum(0, dtype=fg.float64).dtype == fg.float64
    w = fg.tensor(a[0, :5], requires_grad=True)
    assert fg.gradcheck(lambda t: (t.cumsum(0) ** 2).sum(), [w], second_order=True)


def test_layers_keep_their_arguments_as_pytorchs_attributes():
    backbone = nn.Linear(16, 8)
    head = nn.Linear(backbone.out_features, 3, bias=False)  # transfer learning's habit
    assert (backbone.in_features, head.in_features, head.bias) == (16, 8, None)
    conv = nn.Conv2d(1, 8, 3, padding="same")
    assert (conv.kernel_size, conv.stride, conv.padding, conv.in_channels, conv.groups) == (
        (3, 3),
        (1, 1),
        "same",
        1,
        1,
    )
    valid = nn.Conv2d(1, 2, 3, padding="valid")
    assert (
        valid.padding == "valid" and "padding=valid" in repr(valid) and valid(fg.ones(1, 1, 5, 5)).shape == (1, 2, 3, 3)
    )
    assert copy.deepcopy(valid).padding == "valid" and F.conv2d(
        fg.ones(1, 1, 5, 5), valid.weight, padding="valid"
    ).shape == (1, 2, 3, 3)
    assert nn.Dropout(0.2).p == 0.2 and nn.LayerNorm(8).normalized_shape == (8,) and nn.LayerNorm(8).eps == 1e-5
    assert nn.Embedding(5, 3).embedding_dim == 3 and nn.BatchNorm2d(4).num_features == 4
    lstm = nn.LSTM(3, 5, num_layers=2, batch_first=True)
    assert (lstm.hidden_size, lstm.num_layers, lstm.batch_first, lstm.bias) == (5, 2, True, True)
    assert copy.deepcopy(lstm).hidden_size == 5
    with pytest.raises(AttributeError, match="foo"):
        _ = backbone.foo


def test_conv1d_group_norm_and_submodules_as_pytorchs():
    # PyTorch 2.15's float64 values for the same weights and input.
    x = fg.tensor(np.sin(np.arange(2 * 4 * 9.0)).reshape(2, 4, 9))
    conv = nn.Conv1d(4, 6, 3, stride=2, padding=1, groups=2).double()
    conv.weight.data = fg.tensor(np.cos(np.arange(6 * 2 * 3.0)).reshape(6, 2, 3))
    conv.bias.data = fg.arange(6).double()
    y = conv(x)
    assert y.shape == (2, 6, 5) and sorted(conv.state_dict()) == ["bias", "weight"]
    close(y.sum().item(), 133.80316213255094)
    close(y[1, 2].tolist()[:3], [-0.050997061698979884, 1.2656500483938702, 5.036963459509744])
    assert conv(x[0]).shape == (6, 5) and F.conv1d(x, conv.weight, conv.bias, padding="same", groups=2).shape == (
        2,
        6,
        9,
    )
    norm = nn.GroupNorm(2, 4).double()
    norm.weight.data = fg.arange(1, 5).double()
    norm.bias.data = fg.arange(4).double()
    z = norm(x)
    close(z.sum().item(), 111.90863593712017)
    close(z[0, 3, :3].tolist(), [8.278858675164251, 4.300761238869149, -1.122800865305227])
    w = fg.tensor(np.sin(np.arange(8.0)).reshape(1, 4, 2), requires_grad=True)
    assert fg.gradcheck(lambda t: F.group_norm(t, 2).sin().sum(), [w], second_order=True)
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.ReLU(), nn.Linear(2, 3)))
    assert model.get_submodule("1.1").out_features == 3 and model.get_parameter("1.1.weight").shape == (3, 2)
    with pytest.raises(AttributeError, match="no submodule"):
        model.get_submodule("1.5")


def test_pools_embeddings_and_convolutions_keep_pytorchs_attributes():
    pool = nn.MaxPool2d(2)
    assert (pool.kernel_size, pool.stride, pool.padding, pool.dilation, pool.ceil_mode) == (2, 2, 0, 1, False)
    assert nn.MaxPool2d((2, 3), stride=1).kernel_size == (2, 3) and nn.AvgPool2d(3).count_include_pad
    assert nn.Embedding(10, 3, padding_idx=-1).padding_idx == 9 and nn.Embedding(10, 3).padding_idx is None
    conv = nn.Conv1d(4, 8, (3,), stride=(2,), bias=False)
    assert repr(conv) == "Conv1d(4, 8, kernel_size=(3,), stride=(2,), bias=False)" and conv.stride == (2,)
    assert nn.GroupNorm(2, 6)(fg.zeros(0, 6, 3)).shape == (0, 6, 3)
    with pytest.raises(NotImplementedError, match="scale_grad_by_freq"):
        nn.Embedding.from_pretrained(fg.ones(3, 2), scale_grad_by_freq=True)


def test_cumsum_converts_before_summing_and_carries_infinities():
    assert fg.tensor([0.5, 0.5, 0.7]).cumsum(0, dtype=fg.int64).tolist() == [0, 0, 0]  # converted first
    assert fg.tensor([1.0, float("inf"), 2.0]).cumsum(0).tolist() == [1.0, float("inf"), float("inf")]


def test_a_failed_recomputation_leaves_the_generator_where_it_was():
    from ferrograd.utils.checkpoint import checkpoint

    def failing_on_the_second_run():
        calls = []

        def noisy(t):
            calls.append(1)
            if len(calls) == 2:
                raise KeyError("second run")
            return t * fg.rand(3)

        return noisy

    x = fg.ones(3, requires_grad=True)
    fg.manual_seed(5)
    checkpoint(failing_on_the_second_run(), x)
    expected = fg.rand(2).tolist()
    fg.manual_seed(5)
    y = checkpoint(failing_on_the_second_run(), x)
    with pytest.raises(KeyError, match="second run"):
        y.sum().backward()
    assert fg.rand(2).tolist() == expected


@pytest.mark.parametrize(
    "equation, shapes",
    [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("bhid,bhjd->bhij", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("ii->i", [(3, 3)]),
        ("ii", [(3, 3)]),
        ("bA", [(2, 3)]),
        ("...ij,...jk", [(2, 3, 4), (2, 4, 5)]),
        ("...i,...i->...", [(2, 1, 3), (4, 3)]),
        ("ab,bc,cd->ad", [(2, 3), (3, 4), (4, 2)]),
        ("i,->i", [(4,), ()]),
    ],
)
def test_einsum_matches_numpy(equation, shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    got = fg.einsum(equation, *[fg.tensor(a) for a in arrays])
    want = np.einsum(equation, *arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
    # The operands as one list, as torch.einsum also takes them.
    np.testing.assert_allclose(
        fg.einsum(equation, [fg.tensor(a) for a in arrays]).numpy(), want, rtol=1e-12, atol=1e-12
    )


def test_einsum_gradients_and_errors():
    rng = np.random.default_rng(1)
    a_np, b_np = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 5))
    a, b = fg.tensor(a_np, requires_grad=True), fg.tensor(b_np, requires_grad=True)
    fg.einsum("bij,bjk->bik", a, b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.ones((2, 3, 5)) @ b_np.transpose(0, 2, 1), rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), a_np.transpose(0, 2, 1) @ np.ones((2, 3, 5)), rtol=1e-12)
    with pytest.raises(RuntimeError, match="einsum \"ij,jk->ik\": 'j' has length 4 and 2"):
        fg.einsum("ij,jk->ik", fg.ones(3, 4), fg.ones(2, 5))
    with pytest.raises(fg.OpError, match="2 terms for 1 operands"):
        fg.einsum("ij,jk", fg.ones(3, 4))
    with pytest.raises(TypeError, match="sublist form"):
        fg.einsum(fg.ones(3), [0])


# ---- silent differences from PyTorch, each now PyTorch's answer or its error ----


def test_std_has_gradient_zero_where_the_elements_are_equal():
    x = fg.tensor([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]], dtype=fg.float64, requires_grad=True)
    x.std(dim=1).sum().backward()
    g = x.grad.numpy()
    assert g[0].tolist() == [0.0, 0.0, 0.0] and np.isfinite(g).all()
    # The other row as PyTorch: (x - mean) / ((n - 1) · std).
    row = np.array([1.0, 2.0, 4.0])
    close(g[1], (row - row.mean()) / (2 * row.std(ddof=1)))
    flat = fg.full((3,), 2.0, dtype=fg.float64, requires_grad=True)
    std, mean = fg.std_mean(flat)
    (std + mean).backward()
    assert flat.grad.tolist() == [1 / 3] * 3


def test_param_groups_are_read_live_as_pytorchs():
    a = fg.ones(2, requires_grad=True)
    b = fg.ones(2, requires_grad=True)
    c = fg.ones(1, requires_grad=True)
    opt = fg.optim.SGD([a], lr=0.5)
    opt.param_groups[0]["params"] = [b]
    (a * b).sum().backward()
    opt.step()
    assert a.tolist() == [1.0, 1.0] and b.tolist() == [0.5, 0.5]
    opt.zero_grad()
    assert b.grad is None and a.grad is not None
    # The list changed in place is read too; Adam keeps b's moments across the change.
    adam = fg.optim.Adam([b], lr=0.1)
    (b * b).sum().backward()
    adam.step()
    adam.param_groups[0]["params"].append(c)
    b.grad, c.grad = fg.ones(2), fg.ones(1)
    adam.step()
    assert len(adam.state_dict()["state"]) == 2 and adam.state_dict()["state"][0]["step"].item() == 2
    assert c.tolist() != [1.0]
    with pytest.raises(ValueError, match="more than one parameter group"):
        two = fg.optim.SGD([{"params": [a]}, {"params": [b]}], lr=0.1)
        two.param_groups[1]["params"] = [a]
        two.step()


def test_integer_sums_and_scans_are_exact_and_wrap_as_int64():
    big = fg.tensor([2**53 + 1, 2])
    assert big.sum().item() == 2**53 + 3 and big.sum().dtype == fg.int64
    assert big.cumsum(0).tolist() == [2**53 + 1, 2**53 + 3]
    wraps = fg.tensor([2**63 - 1, 1])
    assert wraps.sum().item() == -(2**63) and wraps.cumsum(0).tolist() == [2**63 - 1, -(2**63)]
    assert fg.tensor([2**40, 2**30]).cumprod(0).tolist() == [2**40, 2**70 % 2**64]
    assert fg.tensor([3, 2**62]).cumprod(0).tolist() == [3, -(2**62)]
    assert (fg.tensor([1, 2, 3]) > 1).sum().item() == 2
    assert fg.tensor(5).cumprod(0).item() == 5 and fg.tensor([1, 2]).cumprod(0, dtype=fg.float64).dtype == fg.float64
    # Float running products keep their derivatives of every order.
    x = fg.tensor([1.5, -2.0, 0.5], dtype=fg.float64, requires_grad=True)
    assert fg.gradcheck(lambda t: t.cumprod(0), (x,), second_order=True)


def test_grad_of_another_dtype_and_view_of_a_copy_are_refused():
    w = fg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="different type"):
        w.grad = fg.ones(2, dtype=fg.float64)
    w.grad = fg.ones(2)
    assert w.grad.dtype == fg.float32
    x = fg.arange(6.0).reshape(2, 3)
    with pytest.raises(RuntimeError, match="Use .reshape"):
        x.t().view(-1)
    v = x.view(3, 2)
    v[0, 0] = 10.0
    assert x[0, 0].item() == 10.0 and x.t().reshape(-1).tolist()[0] == 10.0
    assert x[:, 0].view(2).tolist() == [10.0, 3.0]
