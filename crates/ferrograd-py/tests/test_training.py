"""The training library from Python: layers, tinynn's Model, PyTorch-style optimizers,
state dicts and checkpoints, data and metrics."""

import numpy as np
import pytest

import ferrograd as fg
from ferrograd import Model
from ferrograd.data import BatchIterator, one_hot
from ferrograd.metrics import AccEvaluator
from ferrograd.nn import Dense, Net, ReLU, SoftmaxCrossEntropyLoss
from ferrograd.optim import SGD, Adam


def blobs(n=200, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    centers = np.array([[2.0, 0.0], [-2.0, 0.0], [0.0, 2.5]])
    x = (centers[labels] + 0.5 * rng.standard_normal((n, 2))).astype(np.float32)
    return x, labels


def test_tinynn_pipeline_learns():
    fg.manual_seed(0)
    x, labels = blobs()
    net = Net([Dense(2, 16), ReLU(), Dense(16, 3)])
    model = Model(net=net, loss=SoftmaxCrossEntropyLoss(), optimizer=Adam(lr=0.05))
    iterator = BatchIterator(batch_size=32)
    losses = []
    for _ in range(10):
        for batch in iterator(x, one_hot(labels, 3)):
            pred = model.forward(batch.inputs)
            loss, grads = model.backward(pred, batch.targets)
            assert isinstance(loss, float) and len(grads) == 4
            model.apply_grad(grads)
            losses.append(loss)
    assert losses[-1] < 0.2 < losses[0]
    res = AccEvaluator().evaluate(np.argmax(model.forward(x), axis=1), labels)
    assert set(res) == {"total_num", "hit_num", "accuracy"}
    assert res["total_num"] == 200 and res["accuracy"] > 0.95
    # The parameters got their .grad from the last backward.
    assert net[0].weight.grad.shape == (16, 2)


def test_pytorch_style_optimizer_steps_from_grad():
    fg.manual_seed(1)
    layer = Dense(3, 1)
    opt = SGD(layer.parameters(), lr=0.1)
    x = fg.tensor(np.eye(3, dtype=np.float32))
    before = layer.weight.numpy().copy()
    loss = layer(x).sum()
    loss.backward()
    opt.step()
    np.testing.assert_allclose(layer.weight.numpy(), before - 0.1, rtol=1e-6)
    opt.zero_grad()
    assert layer.weight.grad is None
    w = fg.tensor([1.0, -1.0], requires_grad=True)
    opt = Adam([w], lr=0.1)
    for _ in range(200):
        opt.zero_grad()
        ((w - 3.0) ** 2).sum().backward()
        opt.step()
    np.testing.assert_allclose(w.numpy(), [3.0, 3.0], atol=1e-2)
    with pytest.raises(TypeError, match="trainable leaf"):
        SGD([fg.tensor([1.0])], lr=0.1)


def test_parameters_are_named_as_pytorch_and_keep_their_identity():
    net = Net([Dense(4, 3), ReLU(), Dense(3, 2)])
    names = [n for n, _ in net.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert net[0].weight is net[0].weight
    assert net[0].weight.shape == (3, 4) and net.num_params() == 4 * 3 + 3 + 3 * 2 + 2
    assert net.params["2.bias"].shape == (2,)
    with pytest.raises(AttributeError, match="no parameter"):
        _ = net[0].kernel


def test_state_dict_and_safetensors_round_trip(tmp_path):
    fg.manual_seed(2)
    a = Net([fg.nn.Conv2D(1, 2, 3, padding=1), fg.nn.BatchNorm2d(2), ReLU(), fg.nn.Flatten()])
    fg.manual_seed(3)
    b = Net([fg.nn.Conv2D(1, 2, 3, padding=1), fg.nn.BatchNorm2d(2), ReLU(), fg.nn.Flatten()])
    x = fg.randn(2, 1, 5, 5)
    a(x)  # moves a's running statistics
    assert set(a.state_dict()) == {
        "0.weight",
        "0.bias",
        "1.weight",
        "1.bias",
        "1.running_mean",
        "1.running_var",
        "1.num_batches_tracked",
    }
    path = tmp_path / "a.safetensors"
    a.save(path)
    b.load(path)
    a.eval(), b.eval()
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    c = Net([Dense(25, 2)])
    with pytest.raises(ValueError, match="0.weight"):
        c.load(path)
    with pytest.raises(OSError, match="missing.safetensors"):
        c.load(tmp_path / "missing.safetensors")
    state = {k: v.numpy() for k, v in c.state_dict().items()}
    state["0.bias"] = np.array([5.0, 6.0], dtype=np.float32)
    c.load_state_dict(state)
    assert c[0].bias.tolist() == [5.0, 6.0]
    with pytest.raises(ValueError):
        c.load_state_dict({"0.bias": np.zeros(3, dtype=np.float32)})
    assert c[0].bias.tolist() == [5.0, 6.0]


def test_layers_run_in_both_modes():
    fg.manual_seed(4)
    drop = fg.nn.Dropout(0.5)
    x = fg.ones(1000)
    assert 300 < (drop(x) == 0).sum().item() < 700
    drop.eval()
    assert (drop(x) == 0).sum().item() == 0
    lstm = fg.nn.LSTM(3, 5, num_layers=2, batch_first=True)
    out, (h, c) = lstm(fg.randn(4, 7, 3))
    assert out.shape == (4, 7, 5) and h.shape == (2, 4, 5) and c.shape == (2, 4, 5)
    assert fg.nn.Net([lstm])(fg.randn(4, 7, 3)).shape == (4, 7, 5)
    assert [n for n, _ in lstm.named_parameters()][:2] == ["weight_ih_l0", "weight_hh_l0"]
    out, h = fg.nn.GRU(3, 4).forward_seq(fg.randn(5, 2, 3), fg.zeros(1, 2, 4))
    assert out.shape == (5, 2, 4) and h.shape == (1, 2, 4)
    y = fg.nn.ConvTranspose2D(2, 3, 4, stride=2, padding=1)(fg.randn(1, 2, 5, 5))
    assert y.shape == (1, 3, 10, 10)
    assert fg.nn.MaxPool2D(2)(fg.randn(1, 1, 4, 6)).shape == (1, 1, 2, 3)


def test_batch_iterator_covers_every_sample_once_in_the_rust_order():
    x = np.arange(10, dtype=np.float32)[:, None]
    y = np.arange(10)
    it = BatchIterator(batch_size=4, seed=7)
    seen = [batch.targets for batch in it(x, y)]
    assert [len(s) for s in seen] == [4, 4, 2]
    order = np.concatenate(seen)
    assert sorted(order.tolist()) == list(range(10))
    np.testing.assert_array_equal(order, fg._core.epoch_order(10, 7, 0))
    second = np.concatenate([b.targets for b in it(x, y)])
    assert not np.array_equal(order, second)  # a new permutation each epoch
    plain = np.concatenate([b.targets for b in BatchIterator(4, shuffle=False)(x, y)])
    np.testing.assert_array_equal(plain, y)
    with pytest.raises(ValueError, match="batch_size"):
        BatchIterator(batch_size=0)


def test_losses_and_their_gradients():
    pred = fg.tensor([[2.0, 0.0, -1.0]])
    target = one_hot([0], 3)
    ce = SoftmaxCrossEntropyLoss()
    p = np.exp([2.0, 0.0, -1.0]) / np.exp([2.0, 0.0, -1.0]).sum()
    assert ce.loss(pred, target).item() == pytest.approx(-np.log(p[0]), rel=1e-6)
    np.testing.assert_allclose(ce.grad(pred, target).numpy(), [p - [1, 0, 0]], rtol=1e-5)
    assert ce(pred, np.array([0])).item() == pytest.approx(-np.log(p[0]), rel=1e-6)
    assert fg.nn.MSELoss()(fg.tensor([1.0, 3.0]), np.array([0.0, 0.0])).item() == 5.0
    assert fg.nn.HuberLoss(1.0)(fg.tensor([3.0]), np.array([0.0])).item() == 2.5


def test_layers_written_in_python_train_inside_a_net():
    class Affine(fg.nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = fg.tensor([1.0, 1.0], requires_grad=True)
            self.shift = fg.tensor([0.0, 0.0], requires_grad=True)

        def forward(self, x):
            return x * self.scale + self.shift

    fg.manual_seed(3)
    affine = Affine()
    net = Net([Dense(3, 2), affine, fg.nn.Tanh()])
    names = [n for n, _ in net.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.scale", "1.shift"]
    model = Model(net, fg.nn.MSELoss(), Adam(lr=0.05))
    x = np.random.default_rng(0).standard_normal((16, 3)).astype(np.float32)
    y = np.full((16, 2), 0.5, dtype=np.float32)
    before = affine.scale.tolist()
    losses = [model.train_step(x, y) for _ in range(50)]
    assert losses[-1] < losses[0] / 4
    assert affine.scale.tolist() != before and affine.scale.grad is not None
    assert set(affine.state_dict()) == {"scale", "shift"}

    class Broken(fg.nn.Module):
        def forward(self, x):
            raise KeyError("inside forward")

    with pytest.raises(KeyError, match="inside forward"):
        Net([Dense(3, 2), Broken()])(x)
    with pytest.raises(TypeError, match="neither"):
        Net([Dense(3, 2), object()])


def test_python_modules_follow_the_mode_and_report_their_mistakes():
    class Noisy(fg.nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = fg.nn.Dropout(0.5)
            self.w = fg.tensor([1.0], requires_grad=True)

        def forward(self, x):
            return self.drop(x * self.w)

    noisy = Noisy()
    model = Model(Net([noisy]), fg.nn.MSELoss(), SGD(lr=0.1))
    x = np.ones((1, 200), dtype=np.float32)
    assert (model.predict(x).numpy() == 1.0).all()  # evaluation: dropout off inside the module
    assert (model.forward(x).numpy() == 0.0).any()  # training: on
    noisy.w = fg.tensor([2.0])  # no longer a parameter
    assert [n for n, _ in noisy.named_parameters()] == []

    class NoInit(fg.nn.Module):
        def __init__(self):
            pass

        def forward(self, x):
            return x

    with pytest.raises(AttributeError):
        Net([NoInit()])


def test_requires_grad_false_freezes_a_parameter():
    fg.manual_seed(0)
    layer = fg.nn.Dense(2, 1)
    before = layer.weight.numpy().copy()
    layer.weight.requires_grad_(False)
    assert not layer.weight.requires_grad and layer.weight.is_leaf
    opt = fg.optim.SGD(layer.parameters(), lr=0.5)
    layer(fg.ones(1, 2)).sum().backward()
    opt.step()
    np.testing.assert_array_equal(layer.weight.numpy(), before)
    layer.weight.requires_grad_(True)
    layer(fg.ones(1, 2)).sum().backward()
    opt.step()
    assert not np.array_equal(layer.weight.numpy(), before)
    with pytest.raises(RuntimeError, match="leaf"):
        (layer.weight * 2).requires_grad_()


def test_model_extras_and_grad_mode_helpers():
    fg.manual_seed(1)
    net = fg.nn.Net([fg.nn.Dense(3, 8), fg.nn.Dropout(0.5), fg.nn.Dense(8, 2)])
    model = fg.Model(net, fg.nn.MSELoss(), fg.optim.SGD(lr=0.1))
    x, y = np.ones((4, 3), dtype=np.float32), np.zeros((4, 2), dtype=np.float32)
    losses = [model.train_step(x, y) for _ in range(30)]
    assert losses[-1] < losses[0]
    model.set_phase("TEST")
    np.testing.assert_array_equal(model.forward(x).numpy(), model.predict(x).numpy())
    assert not model.predict(x).requires_grad
    with pytest.raises(ValueError, match="TRAIN or TEST"):
        model.set_phase("sideways")
    w = fg.tensor([1.0], requires_grad=True)
    with fg.set_grad_enabled(False):
        assert not (w * 2).requires_grad
    assert fg.is_grad_enabled()

    @fg.no_grad
    def bare(t):
        return t * 2

    assert not bare(w).requires_grad
    names = {}
    exec("from ferrograd import *", names)
    assert "sum" not in names and "tensor" in names


def test_batch_iterator_checks_at_once_and_yields_named_tuples():
    it = fg.data.BatchIterator(batch_size=2, shuffle=False)
    with pytest.raises(ValueError, match="3 inputs but 2 targets"):
        it([1, 2, 3], [1, 2])
    batches = list(it([[1.0], [2.0], [3.0]], [0, 1, 2]))
    x, y = batches[0]
    assert x.tolist() == [[1.0], [2.0]] and y.tolist() == [0, 1]
