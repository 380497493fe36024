"""The device boilerplate of PyTorch scripts: ``fg.device("cpu")``, ``fg.cuda.is_available()``
(False), ``fg.backends.mps.is_available()`` (False), ``fg.backends.cudnn.benchmark = True``
(ignored) and the ``device=`` argument of the creation functions. ferrograd computes on the
CPU: any other device is refused by name."""

import functools
import sys
import types

from . import _core


class device:  # noqa: N801 (PyTorch's name)
    """A device, as ``torch.device``: only the CPU (``"cpu"``, ``"cpu:0"``) exists here."""

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):  # noqa: A002 (PyTorch's argument name)
        if isinstance(type, device):
            type, index = type.type, type.index
        name = str(type)
        if ":" in name:
            name, given = name.split(":", 1)
            index = int(given)
        check(name)
        self.type, self.index = name, index

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except ValueError:
                return False
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        index = "" if self.index is None else f", index={self.index}"
        return f"device(type='{self.type}'{index})"


def check(where):
    """Refuses every device but the CPU (``None`` means the CPU)."""
    if where is None:
        return
    name = where.type if isinstance(where, device) else str(where)
    if name.split(":")[0] != "cpu":
        raise ValueError(f"device {name!r}: ferrograd computes on the CPU only")


def on_cpu(make):
    """``make`` taking PyTorch's ``device=`` (the CPU only) besides its own arguments."""

    @functools.wraps(make)
    def made(*args, device=None, **kwargs):
        check(device)
        return make(*args, **kwargs)

    return made


cuda = types.ModuleType("ferrograd.cuda", "No CUDA devices: ferrograd computes on the CPU.")
cuda.is_available = lambda: False
cuda.device_count = lambda: 0
cuda.is_bf16_supported = lambda: False

backends = types.ModuleType("ferrograd.backends", "PyTorch's backend switches, for its scripts.")
backends.mps = types.SimpleNamespace(is_available=lambda: False, is_built=lambda: False)
backends.cuda = types.SimpleNamespace(is_built=lambda: False, matmul=types.SimpleNamespace(allow_tf32=False))
# Settable and ignored: they tune GPU libraries ferrograd does not use.
backends.cudnn = types.SimpleNamespace(benchmark=False, deterministic=False, enabled=False, allow_tf32=False)

# `import ferrograd.cuda` finds them too.
sys.modules[cuda.__name__], sys.modules[backends.__name__] = cuda, backends

del _core
