"""What the peer scripts share: MNIST-format IDX files (plain or gzip), timing, RESULT lines.

Each script runs the same work as a ferrograd example or benchmark, so that the two can be
timed side by side in one session (see README.md in this folder).
"""

import gzip
import pathlib
import resource
import statistics
import struct
import time

import numpy as np


def _open(path):
    path = pathlib.Path(path)
    for candidate in (path, path.with_name(path.name + ".gz")):
        if candidate.exists():
            return gzip.open(candidate) if candidate.suffix == ".gz" else open(candidate, "rb")
    raise FileNotFoundError(f"{path} (or {path}.gz); run scripts/fetch-data.sh")


def read_idx(path):
    """An IDX array (u8 data, as MNIST stores images and labels)."""
    with _open(path) as f:
        zero, kind, ndim = struct.unpack(">HBB", f.read(4))
        if zero != 0 or kind != 0x08:
            raise ValueError(f"{path}: not an IDX file of unsigned bytes")
        dims = struct.unpack(">" + "I" * ndim, f.read(4 * ndim))
        return np.frombuffer(f.read(), dtype=np.uint8).reshape(dims)


def load_mnist(data_dir, train):
    """Images as float32 rows of 784 values in [0, 1] and labels as int64, as ferrograd's
    `Mnist::load` gives them."""
    prefix = "train" if train else "t10k"
    d = pathlib.Path(data_dir)
    images = read_idx(d / f"{prefix}-images-idx3-ubyte").reshape(-1, 784)
    labels = read_idx(d / f"{prefix}-labels-idx1-ubyte")
    return images.astype(np.float32) / 255.0, labels.astype(np.int64)


def epoch_line(epoch, hits, total, loss, secs, samples):
    """An epoch's figures in the layout of the Rust examples' lines, for bench/pairs.sh."""
    print(
        f"Epoch {epoch} {{total_num: {total}, hit_num: {hits}, accuracy: {hits / total:.4f}}}"
        f"  loss {loss:.4f}  {secs:.2f} s ({samples / secs:.0f} samples/s)",
        flush=True,
    )


def peak_memory():
    """The process's peak resident memory, as the Rust examples print it."""
    print(f"peak memory (RSS): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


def time_repeats(step, repeats, warmup=3):
    """Milliseconds of each of `repeats` calls of `step`, after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def result(tool, case, shape, times):
    """One line in the format of ferrograd's bench_layers, for bench/pairs.sh to read."""
    print(
        f"RESULT {tool} {case} shape={list(shape)} fwd+bwd_ms: min={min(times):.3f} "
        f"median={statistics.median(times):.3f} (n={len(times)})",
        flush=True,
    )
