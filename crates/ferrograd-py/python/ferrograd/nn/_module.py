"""``Module`` for layers written in Python, and PyTorch's containers, with PyTorch's names
and behaviour: nested parameter and buffer names, a full ``state_dict``, ``print(module)``
as a tree of layers."""

import collections as _collections

import numpy as _np

from .._core import Layer, Tensor
from .._core import dtype as _dtype
from .._core import load_tensors as _load_tensors
from .._core import save_tensors as _save_tensors
from .._core import tensor as _tensor
from . import _hooks

_DEVICES = ("cpu", "cuda", "mps", "xpu", "meta")


def _dtype_named(name):
    """The dtype a string such as ``"float64"`` names."""

    name = {"double": "float64", "float": "float32", "long": "int64"}.get(name, name)
    found = getattr(_dtype, name, None)
    if not isinstance(found, _dtype):
        raise TypeError(f"Module.to: {name!r} names neither a device nor a dtype")
    return found


class StateDictError(RuntimeError, ValueError):
    """``load_state_dict`` found names or shapes that do not fit; nothing was changed.
    (PyTorch raises ``RuntimeError``; earlier ferrograd raised ``ValueError``: both catch it.)"""


IncompatibleKeys = _collections.namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _join(prefix, name):
    """``name`` under ``prefix``, with a dot between them, as PyTorch names nested entries."""
    return f"{prefix}.{name}" if prefix else name


def _is_module(value):
    return isinstance(value, Module)


def _child_state(child, prefix):
    """A child's state dict under ``prefix`` (core layers include their buffers)."""
    if isinstance(child, Layer):
        return {prefix + k: v for k, v in child.state_dict().items()}
    return child.state_dict(prefix=prefix)


class _ModuleType(type):
    """``Module``'s type: the core's layers count as modules too (``isinstance(nn.Linear(2, 2),
    nn.Module)``), as every layer is one in PyTorch; they have the same methods."""

    def __instancecheck__(cls, obj):
        return super().__instancecheck__(obj) or (cls is Module and isinstance(obj, Layer))

    def __subclasscheck__(cls, sub):
        return super().__subclasscheck__(sub) or (cls is Module and issubclass(sub, Layer))


class Module(metaclass=_ModuleType):
    """Base class of layers written in Python, as PyTorch's ``nn.Module``: assign trainable
    tensors (``requires_grad=True``) and layers as attributes, define ``forward``.

        class Scale(fg.nn.Module):
            def __init__(self):
                super().__init__()
                self.s = fg.tensor(2.0, requires_grad=True)
                self.register_buffer("calls", fg.zeros(1))

            def forward(self, x, factor=1.0):
                return x * self.s * factor

    Parameters and buffers are named by path (``"block.0.weight"``), the core layers inside
    included (a ``BatchNorm1d``'s ``running_mean``). ``forward`` takes any arguments. A module
    can go into a ``Net`` beside the core's layers, and into ``Model`` and the optimizers.
    """

    def __init__(self):
        object.__setattr__(self, "_parameters", {})
        object.__setattr__(self, "_buffers", {})
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", {})
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"call Module.__init__() in {type(self).__name__}.__init__ first")
        if name in self._buffers and (value is None or isinstance(value, Tensor)):
            self._buffers[name] = value
        else:
            for store in (self._parameters, self._buffers, self._modules):
                store.pop(name, None)
            if isinstance(value, Tensor) and value.is_parameter:
                self._parameters[name] = value
            elif _is_module(value):
                self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        for store in (self._parameters, self._buffers, self._modules):
            store.pop(name, None)
        object.__delattr__(self, name)

    # ---- registration ----

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor saved in ``state_dict`` (unless ``persistent=False``) but not trained."""

        value = None if tensor is None else (tensor if isinstance(tensor, Tensor) else _tensor(tensor))
        self._parameters.pop(name, None)
        self._modules.pop(name, None)
        self._buffers[name] = value
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)
        object.__setattr__(self, name, value)

    def register_parameter(self, name, param):
        if param is not None and not (isinstance(param, Tensor) and param.is_parameter):
            raise TypeError(f"register_parameter: {name!r} must be a trainable tensor (requires_grad=True)")
        setattr(self, name, param)

    def add_module(self, name, module):
        if module is not None and not _is_module(module):
            raise TypeError(f"add_module: {name!r} is a {type(module).__name__}, not a layer or Module")
        setattr(self, name, module)

    register_module = add_module

    # ---- calling ----

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward")

    def __call__(self, *args, **kwargs):
        if _hooks.hooked(self):
            return _hooks.call(self, args, kwargs)
        return self.forward(*args, **kwargs)

    # ---- hooks (PyTorch's, as the core's layers have them) ----

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """``hook(module, args)`` runs before each call and may return new arguments."""
        return _hooks.register(self, "forward_pre", hook, prepend, with_kwargs)

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False, always_call=False):
        """``hook(module, args, output)`` runs after each call and may return a new output."""
        del always_call
        return _hooks.register(self, "forward", hook, prepend, with_kwargs)

    def register_full_backward_hook(self, hook, prepend=False):
        """``hook(module, grad_input, grad_output)`` runs once the gradients of the call's
        inputs are known, and may return new ones."""
        return _hooks.register(self, "backward", hook, prepend)

    # ---- walking the tree ----

    def named_children(self):
        return iter([(n, m) for n, m in self._modules.items() if m is not None])

    def children(self):
        return iter([m for _, m in self.named_children()])

    def named_modules(self, prefix=""):
        """``(name, module)`` for this module and every one inside it, each once."""
        out, seen = [], set()

        def walk(m, name):
            if id(m) in seen:
                return
            seen.add(id(m))
            out.append((name, m))
            for n, child in m.named_children():
                walk(child, f"{name}.{n}" if name else n)

        walk(self, prefix)
        return iter(out)

    def modules(self):
        return iter([m for _, m in self.named_modules()])

    def get_submodule(self, target):
        """The module at the dotted path ``target`` (``"blocks.0.attn"``; ``""`` is this one)."""
        m = self
        for part in target.split(".") if target else []:
            children = dict(m.named_children())
            if part not in children:
                raise AttributeError(f"{type(m).__name__} has no submodule {part!r} (in {target!r})")
            m = children[part]
        return m

    def get_parameter(self, target):
        """The parameter at the dotted path ``target`` (``"blocks.0.attn.in_proj_weight"``)."""
        path, _, name = target.rpartition(".")
        owner = self.get_submodule(path)
        found = dict(owner.named_parameters(recurse=False)).get(name)
        if found is None:
            raise AttributeError(f"{type(owner).__name__} has no parameter {name!r} (in {target!r})")
        return found

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """``(name, parameter)`` pairs: this module's, then each sub-layer's
        (``"block.weight"``). A parameter shared by two layers (tied weights) is listed once,
        under its first name."""
        out, seen = [], set()

        def add(name, p):
            if p is None or (remove_duplicate and id(p) in seen):
                return
            seen.add(id(p))
            out.append((name, p))

        for n, p in self._parameters.items():
            add(_join(prefix, n), p)
        if recurse:
            for n, child in self.named_children():
                for name, p in child.named_parameters(prefix=_join(prefix, n), remove_duplicate=False):
                    add(name, p)
        return iter(out)

    def parameters(self, recurse=True):
        return iter([p for _, p in self.named_parameters(recurse=recurse)])

    def named_buffers(self, prefix="", recurse=True):
        """``(name, buffer)`` pairs, the core layers' inside included."""
        out = [(_join(prefix, n), b) for n, b in self._buffers.items() if b is not None]
        if recurse:
            for n, child in self.named_children():
                out.extend(child.named_buffers(prefix=_join(prefix, n)))
        return iter(out)

    def buffers(self, recurse=True):
        return iter([b for _, b in self.named_buffers(recurse=recurse)])

    def _named_buffer_refs(self):
        """The core layers' buffers inside, for a ``Net`` holding this module."""
        out = []
        for n, child in self.named_children():
            out.extend((f"{n}.{k}", r) for k, r in child._named_buffer_refs())
        return out

    # ---- state ----

    def state_dict(self, destination=None, prefix="", keep_vars=False):
        """Every parameter and persistent buffer by name, nested modules and the core layers'
        buffers included, in PyTorch's order (a module's own parameters, its buffers, then
        each child's). A tied parameter appears under each of its names, as in PyTorch."""
        out = _collections.OrderedDict() if destination is None else destination
        for n, p in self._parameters.items():
            if p is not None:
                out[prefix + n] = p if keep_vars else p.detach()
        for n, b in self._buffers.items():
            if b is not None and n not in self._non_persistent:
                out[prefix + n] = b if keep_vars else b.detach()
        for n, child in self.named_children():
            out.update(_child_state(child, f"{prefix}{n}."))
        return out

    def load_state_dict(self, state_dict, strict=True):
        """Loads values by name (tensors or arrays). Every name and shape is checked first:
        with ``strict`` a missing or unexpected name is an error, a wrong shape always is,
        and then nothing changes. Returns ``(missing_keys, unexpected_keys)``."""
        current = self.state_dict()
        missing = [k for k in current if k not in state_dict]
        unexpected = [k for k in state_dict if k not in current]
        wrong = [
            f"{k}: {tuple(_np.shape(state_dict[k]))} for {tuple(current[k].shape)}"
            for k in current
            if k in state_dict and tuple(_np.shape(state_dict[k])) != tuple(current[k].shape)
        ]
        if wrong or (strict and (missing or unexpected)):
            raise StateDictError(
                f"load_state_dict of {type(self).__name__}: missing {missing}, "
                f"unexpected {unexpected}, wrong shape {wrong}"
            )
        merged = {k: state_dict.get(k, v) for k, v in current.items()}
        self._load_checked(merged, "")
        return IncompatibleKeys(missing, unexpected)

    def _load_checked(self, state, prefix):

        for n, p in self._parameters.items():
            if p is not None:
                p.data = state[prefix + n]
        for n, b in self._buffers.items():
            if b is not None and n not in self._non_persistent:
                value = _tensor(_np.asarray(state[prefix + n]), dtype=b.dtype)
                self._buffers[n] = value
                object.__setattr__(self, n, value)
        for n, child in self.named_children():
            sub = f"{prefix}{n}."
            if isinstance(child, Layer):
                child.load_state_dict({k[len(sub) :]: v for k, v in state.items() if k.startswith(sub)})
            else:
                child._load_checked(state, sub)

    def save(self, path):
        """Writes ``state_dict()`` to a safetensors file (PyTorch reads it with
        ``safetensors.torch.load_file``)."""
        _save_tensors(dict(self.state_dict()), str(path))

    def load(self, path, strict=True):
        """Loads a safetensors file written by ``save`` or by PyTorch's safetensors."""
        return self.load_state_dict(_load_tensors(str(path)), strict=strict)

    # ---- modes and gradients ----

    def train(self, mode=True):
        object.__setattr__(self, "training", bool(mode))
        for m in self.children():
            m.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's ``.grad`` (to None, or to zeros with
        ``set_to_none=False``)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = p.grad * 0.0

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def apply(self, fn):
        """Calls ``fn`` on every sub-module, then on this one (as for custom initialisation)."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def to(self, *args, **kwargs):
        """The module itself, its floating-point parameters and buffers converted when a dtype
        is given (``to(fg.float64)``); the device can only be the CPU."""

        for a in list(args) + list(kwargs.values()):
            if isinstance(a, _dtype):
                if not a.is_floating_point:
                    raise TypeError(f"Module.to only accepts floating point dtypes, got {a}")
                self._convert(a)
                continue
            if isinstance(a, str) and a.split(":")[0] not in _DEVICES:
                self.to(_dtype_named(a))
                continue
            name = a if isinstance(a, str) else getattr(a, "type", None)
            if not isinstance(name, str):
                raise TypeError(f"Module.to: expected a dtype or a device, got {a!r}")
            if not name.startswith("cpu"):
                raise ValueError(f"device {name!r}: ferrograd computes on the CPU only")
        return self

    def _convert(self, dtype):

        for p in self._parameters.values():
            if p is not None:
                p._convert_leaf(dtype)
        for n, b in self._buffers.items():
            if b is not None and b.dtype.is_floating_point:
                self._buffers[n] = _tensor(b.numpy(), dtype=dtype)
                object.__setattr__(self, n, self._buffers[n])
        for m in self.children():
            if isinstance(m, Layer):
                m.double() if dtype.name == "float64" else m.float()
            else:
                m._convert(dtype)

    def double(self):
        """Parameters and buffers converted to float64 in place, as PyTorch's."""

        return self.to(_dtype.float64)

    def float(self):
        """Parameters and buffers converted to float32 in place, as PyTorch's."""

        return self.to(_dtype.float32)

    def cpu(self):
        return self

    # ---- printing ----

    def extra_repr(self):
        """The settings shown after the class name (override, as in PyTorch)."""
        return ""

    def __repr__(self):
        lines = [line for line in self.extra_repr().split("\n") if line]
        for n, m in self.named_children():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({n}): {body}")
        name = type(self).__name__
        if not lines:
            return f"{name}()"
        if len(lines) == 1 and not self._modules:
            return f"{name}({lines[0]})"
        return name + "(\n  " + "\n  ".join(lines) + "\n)"


class _ModuleSequence(Module):
    """Layers in order, named ``"0"``, ``"1"``, ...: what ``ModuleList`` and ``Sequential``
    share."""

    def append(self, module):
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        items = list(self._modules.values())
        items.insert(index, module)
        for k in list(self._modules):
            delattr(self, k)
        return self.extend(items)

    def __setitem__(self, idx, module):
        self.add_module(list(self._modules)[idx], module)

    def __delitem__(self, idx):
        """Removes layers and numbers the rest ``"0"``, ``"1"``, ... again, as PyTorch does."""
        keys = list(self._modules)
        gone = set(keys[idx] if isinstance(idx, slice) else [keys[idx]])
        kept = [m for k, m in self._modules.items() if k not in gone]
        for k in keys:
            delattr(self, k)
        self.extend(kept)

    def pop(self, idx=-1):
        """Removes the layer at ``idx`` and returns it."""
        module = list(self._modules.values())[idx]
        del self[idx]
        return module

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


class ModuleList(_ModuleSequence):
    """Layers in a list, registered so their parameters are found (named ``"0.weight"``)."""

    def __init__(self, modules=None):
        super().__init__()
        self.extend(modules or [])

    def __getitem__(self, idx):
        items = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(items[idx])
        return items[idx]

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward: call its layers")


class ModuleDict(Module):
    """Layers by name, registered so their parameters are found (named ``"name.weight"``)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        delattr(self, key)

    def __contains__(self, key):
        return key in self._modules

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleDict has no forward: call its layers")


class Sequential(_ModuleSequence):
    """The layers applied in order, as PyTorch's ``nn.Sequential``: named ``"0"``, ``"1"``,
    ... or, given one ``OrderedDict``, by its names. Indexing, slicing (a new ``Sequential``
    of the same layers), ``append``, ``extend``, ``insert``, ``len`` and iteration work as in
    PyTorch. (tinynn's ``Net`` is the same sequence run by the core in one call.)"""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], dict):
            for k, m in layers[0].items():
                self.add_module(k, m)
        else:
            self.extend(layers)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(_collections.OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[idx]
