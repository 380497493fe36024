"""Every Python example of the from-PyTorch guide (docs/from_pytorch_python.md) runs as
written."""

import re

import pytest
from conftest import REPO

GUIDE = REPO / "docs" / "from_pytorch_python.md"
BLOCKS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)


def test_the_guide_has_examples():
    assert len(BLOCKS) >= 4


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_guide_example_runs(code, capsys):
    exec(compile(code, str(GUIDE), "exec"), {"__name__": "guide"})
