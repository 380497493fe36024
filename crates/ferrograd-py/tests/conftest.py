import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
MNIST = REPO / "data" / "mnist"


@pytest.fixture
def mnist_dir():
    """The MNIST files of scripts/fetch-data.sh; CI sets FERROGRAD_REQUIRE_DATA=1 so that a
    missing download fails instead of skipping."""
    if not (MNIST / "train-images-idx3-ubyte").exists():
        if os.environ.get("FERROGRAD_REQUIRE_DATA") == "1":
            pytest.fail(f"MNIST is missing from {MNIST} (run scripts/fetch-data.sh)")
        pytest.skip("MNIST not downloaded (scripts/fetch-data.sh)")
    return MNIST
