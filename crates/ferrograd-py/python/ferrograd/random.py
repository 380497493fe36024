"""Random tensors from the generator ``fg.manual_seed`` sets."""

from ._core import rand, randn, shuffle  # noqa: F401

uniform = rand
normal = randn
