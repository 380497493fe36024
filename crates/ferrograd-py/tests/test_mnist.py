"""The seed's run.py on real MNIST, one epoch: at least 0.96, as the Rust example; with
FERROGRAD_EXPECT_HITS set (CI sets the Rust example's count), exactly as many hits."""

import os
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "examples" / "mnist_run.py"


def test_seed_run_py_trains_one_epoch(mnist_dir):
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--data-dir", str(mnist_dir), "--num-ep", "1"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    line = next(row for row in out.splitlines() if row.startswith("Epoch 0"))
    res = eval(line.split("\t")[1])  # the dict tinynn prints
    assert res["total_num"] == 10000 and res["accuracy"] >= 0.96, line
    expected = os.environ.get("FERROGRAD_EXPECT_HITS")
    if expected is not None:
        assert res["hit_num"] == int(expected), f"{line}: the Rust example hit {expected}"
