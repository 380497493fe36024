"""``fg.onnx.export`` with ``torch.onnx.export``'s arguments: the written models run in
onnxruntime (a runtime no one here wrote) and give ferrograd's outputs."""

import io

import numpy as np
import pytest

import ferrograd as fg
import ferrograd.nn as nn
import ferrograd.nn.functional as F

onnx = pytest.importorskip("onnx")
onnxruntime = pytest.importorskip("onnxruntime")


def run(path_or_bytes, **feeds):
    model = path_or_bytes if isinstance(path_or_bytes, bytes) else str(path_or_bytes)
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in feeds.items()})


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv1(x))), 2)
        x = F.relu(self.conv2(x))
        return F.log_softmax(self.fc(fg.flatten(x, 1)), dim=1)


def test_a_cnn_exported_to_a_path_runs_in_onnxruntime_at_any_batch_size(tmp_path):
    fg.manual_seed(0)
    model = Cnn()
    model.train()
    path = tmp_path / "cnn.onnx"
    fg.onnx.export(
        model,
        (fg.randn(2, 1, 8, 8),),
        path,
        input_names=["image"],
        output_names=["logits"],
        dynamic_axes={"image": {0: "batch"}, "logits": [0]},
    )
    assert model.training  # the mode it had is given back
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    names = {t.name for t in onnx.load(str(path)).graph.initializer}
    assert {"conv1.weight", "conv1.bias", "bn.running_mean", "fc.weight"} <= names
    model.eval()
    for batch in (2, 5):
        x = fg.randn(batch, 1, 8, 8)
        (got,) = run(path, image=x)
        np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-5, atol=1e-5)


class TinyGpt(nn.Module):
    def __init__(self, vocab=13, width=8, context=6):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.block = nn.TransformerEncoderLayer(
            width, 2, dim_feedforward=16, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(fg.arange(t))
        mask = nn.Transformer.generate_square_subsequent_mask(t)
        x = self.block(x, src_mask=mask, is_causal=True)
        return self.head(self.ln(x))


def test_a_gpt_exports_with_its_ids_as_an_input():
    fg.manual_seed(1)
    model = TinyGpt()
    ids = fg.tensor(np.array([[1, 5, 2, 7, 0, 3], [4, 4, 12, 1, 9, 2]]))
    buffer = io.BytesIO()
    fg.onnx.export(model, ids, buffer, dynamic_axes={"input": {0: "batch"}})
    other = fg.tensor(np.array([[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8], [9, 7, 9, 3, 2, 3]]))
    (got,) = run(buffer.getvalue(), input=other)
    np.testing.assert_allclose(got, model(other).numpy(), rtol=1e-5, atol=1e-5)


def test_lstm_and_gru_export_with_their_final_states():
    fg.manual_seed(2)
    for layer in (nn.LSTM(3, 5, batch_first=True), nn.GRU(3, 5, batch_first=True)):
        buffer = io.BytesIO()
        x = fg.randn(2, 4, 3)
        fg.onnx.export(layer, (x,), buffer, output_names=["out", "state"])
        out, state = layer(x)
        state = state[0] if isinstance(state, tuple) else state
        got = run(buffer.getvalue(), input=x)
        np.testing.assert_allclose(got[0], out.numpy(), rtol=1e-5, atol=1e-5)
        flat = [g for g in got[1:]]
        assert any(np.allclose(g.reshape(state.shape), state.numpy(), atol=1e-5) for g in flat)


def test_what_the_exporter_cannot_do_is_refused_by_name(tmp_path):
    model = nn.Linear(3, 2)
    x = fg.randn(1, 3)
    with pytest.raises(NotImplementedError, match="axis 0"):
        fg.onnx.export(model, x, tmp_path / "m.onnx", dynamic_axes={"input": {1: "width"}})
    with pytest.raises(TypeError, match="unexpected"):
        fg.onnx.export(model, x, tmp_path / "m.onnx", not_an_option=True)
    with pytest.raises(Exception, match="opset"):
        fg.onnx.export(model, x, tmp_path / "m.onnx", opset_version=9)
    assert not (tmp_path / "m.onnx").exists()


def test_torch_onnx_export_is_the_same_function():
    import ferrograd as torch

    assert torch.onnx.export is fg.onnx.export


def test_a_loaded_model_gives_its_outputs_and_fine_tunes(tmp_path):
    fg.manual_seed(3)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    x = fg.randn(32, 4)
    path = tmp_path / "mlp.onnx"
    fg.onnx.export(model, (x,), path, dynamic_axes={"input": {0: "batch"}})
    loaded = fg.onnx.load(path)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)
    names = [n for n, _ in loaded.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight", "2.bias"]
    target = fg.sin(x.sum(dim=1, keepdim=True))
    opt = fg.optim.Adam(loaded.parameters(), lr=0.01)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        loss = F.mse_loss(loaded(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0], losses[::10]
    # The original is untouched: the loaded model has weights of its own.
    with open(path, "rb") as f:
        again = fg.onnx.load(f)
    np.testing.assert_allclose(again(x).numpy(), model(x).numpy(), rtol=1e-6, atol=1e-6)


def test_loading_what_cannot_run_names_every_operator():
    graph = onnx.helper.make_graph(
        [
            onnx.helper.make_node("Relu", ["x"], ["y"], name="r"),
            onnx.helper.make_node("NonMaxSuppression", ["y"], ["z"], name="nms"),
            onnx.helper.make_node("Loop", ["z"], ["w"], name="loop"),
        ],
        "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, [1])],
    )
    data = onnx.helper.make_model(graph).SerializeToString()
    with pytest.raises(Exception, match=r"NonMaxSuppression \(node \"nms\"\).*Loop|Loop.*NonMax"):
        fg.onnx.load(io.BytesIO(data))


def test_a_model_that_fixes_its_batch_size_is_refused_a_free_batch_axis():
    class FixedBatch(nn.Module):
        def forward(self, x):
            return x + fg.ones(2, 1)

    x = fg.randn(2, 3)
    with pytest.raises(Exception, match="batch size"):
        fg.onnx.export(FixedBatch(), x, io.BytesIO(), dynamic_axes={"input": {0: "batch"}})
    buffer = io.BytesIO()
    fg.onnx.export(FixedBatch(), x, buffer)
    (got,) = run(buffer.getvalue(), input=x)
    np.testing.assert_allclose(got, (x + 1).numpy())


def test_a_loaded_model_takes_all_its_inputs_and_gives_all_its_outputs():
    fg.manual_seed(4)
    lstm = nn.LSTM(3, 5, batch_first=True)
    x = fg.randn(2, 4, 3)
    buffer = io.BytesIO()
    fg.onnx.export(lstm, (x,), buffer, output_names=["out", "h", "c"])
    loaded = fg.onnx.load(io.BytesIO(buffer.getvalue()))
    assert isinstance(loaded, fg.onnx.OnnxModule) and isinstance(loaded, nn.Module)
    assert loaded.output_names == ["out", "h", "c"]
    out, h, c = loaded(x)
    want, (h_want, c_want) = lstm(x)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(h.numpy(), h_want.numpy().reshape(h.shape), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), c_want.numpy().reshape(c.shape), rtol=1e-6, atol=1e-6)
    seen = []
    loaded.register_forward_hook(lambda module, args, output: seen.append(len(output)))
    loaded(x)
    assert seen == [3]
