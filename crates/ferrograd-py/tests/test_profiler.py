"""``fg.profiler`` with ``torch.profiler``'s names: ops, derivative rules and named ranges of a
training step, a table sorted as asked, and a Chrome trace."""

import json

import pytest

import ferrograd as fg
from ferrograd.profiler import ProfilerActivity, profile, record_function


def test_a_profile_of_a_training_step_names_its_ops_rules_and_ranges(tmp_path):
    fg.manual_seed(0)
    model = fg.nn.Sequential(fg.nn.Linear(8, 16), fg.nn.ReLU(), fg.nn.Linear(16, 2))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    x, y = fg.randn(4, 8), fg.randint(0, 2, (4,))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        with record_function("train step"):
            loss = fg.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    averages = prof.key_averages()
    names = {e.key for e in averages}
    assert {"train step", "linear", "relu", "linear backward"} <= names, names
    first = next(e for e in averages if e.key == "linear")
    assert first.flops == 2 * 4 * 8 * 16 + 2 * 4 * 16 * 2  # both layers' products
    assert first.self_cpu_memory_usage == 4 * (4 * 16 + 4 * 2)  # their float32 outputs
    step = next(e for e in averages if e.key == "train step")
    assert step.count == 1 and step.cpu_time_total >= step.self_cpu_time_total >= 0
    assert max(e.cpu_time_total for e in averages) == step.cpu_time_total
    table = averages.table(sort_by="self_cpu_time_total", row_limit=5)
    assert table.startswith("Name") and len(table.splitlines()) == 2 + 5 + 1
    with pytest.raises(ValueError, match="sort_by"):
        averages.table(sort_by="sideways")
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["name"] == "train step"]
    assert len(spans) == 1 and spans[0]["ph"] == "X" and spans[0]["dur"] > 0


def test_profiles_do_not_nest_and_record_nothing_when_off():
    with record_function("unrecorded"):
        fg.ones(2).exp()
    with profile() as prof:
        with pytest.raises(RuntimeError, match="already being recorded"):
            profile().start()

        @record_function("decorated")
        def work():
            return fg.ones(3).sum()

        work()
    keys = {e.key for e in prof.key_averages()}
    assert "decorated" in keys and "unrecorded" not in keys
    with pytest.raises(RuntimeError, match="nothing recorded"):
        profile().key_averages()
