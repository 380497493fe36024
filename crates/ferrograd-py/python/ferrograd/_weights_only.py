"""The loader behind ``fg.load(..., weights_only=True)``: a pickle read opcode by opcode
(``pickletools.genops`` parses them) by an interpreter that knows a closed set of names and
builds every object itself. It never hands the stream to ``pickle.Unpickler``, whose BUILD
opcode sets attributes on any object and whose numpy reconstruction lets a file describe
arrays that numpy then reads as pointers.

What a file may hold: numbers, strings, bytes and the plain containers; numpy arrays and
scalars of plain numeric dtypes, rebuilt here from their bytes; ferrograd tensors (made from
such arrays); ``OrderedDict`` and the named tuples of ``ferrograd.return_types``. BUILD is
accepted only on the stand-ins for numpy's dtype and array, whose state is checked field by
field; everything else a pickle can ask for (other names, INST/OBJ, persistent ids,
out-of-band buffers, a class or function as a value) is refused with ``UnpicklingError``."""

import collections
import copyreg
import math
import pickle
import pickletools

import numpy as np

from . import _core, return_types

# The numpy element types a load rebuilds: plain numbers, whose every byte pattern is a valid
# value. Object, structured, subarray, string, date and void types are refused.
PLAIN_DTYPES = frozenset("b1 i1 i2 i4 i8 u1 u2 u4 u8 f2 f4 f8 c8 c16".split())

# Tuples and frozensets nested deeper than this are refused: hashing one as a dict key or set
# member recurses in C once per level, and a deep enough one overflows the stack.
MAX_DEPTH = 1000


def refuse(what):
    raise pickle.UnpicklingError(
        f"load: {what}, which weights_only=True does not load (pass weights_only=False only "
        "for a file you trust: unpickling runs code)"
    )


class _Dtype:
    """``numpy.dtype(name, align, copy)`` and the BUILD state after it: a plain numeric type
    and its byte order, nothing else."""

    def __init__(self, name, align=False, copy=True):
        if type(name) is not str or name not in PLAIN_DTYPES:
            refuse(
                f"the file holds an array of dtype {name!r} (only {' '.join(sorted(PLAIN_DTYPES))} are plain numbers)"
            )
        if type(align) is not bool or type(copy) is not bool:
            refuse("the file builds a dtype from arguments numpy never writes")
        self.name, self.order = name, "="

    def build(self, state):
        # numpy writes (3, order, subarray, names, fields, elsize, alignment, flags), the
        # middle three None and the last three -1, -1, 0 for a plain type.
        plain = (
            type(state) is tuple
            and len(state) == 8
            and type(state[0]) is int
            and state[0] == 3
            and type(state[1]) is str
            and state[1] in ("<", ">", "|", "=")
            and all(v is None for v in state[2:5])
            and all(type(v) is int for v in state[5:])
            and state[5:] == (-1, -1, 0)
        )
        if not plain:
            refuse("the file gives a dtype fields, a subarray or flags")
        self.order = state[1]

    def numpy(self):
        return np.dtype(self.name).newbyteorder(self.order if self.order != "|" else "=")


# numpy.ndarray as numpy's `_reconstruct` names it: a marker that only `_Array` takes.
_NDARRAY = object()


class _Array:
    """numpy's ``_reconstruct(ndarray, shape, typecode)`` and the BUILD state after it: a new
    array copied from the state's bytes once its shape, dtype and length are checked."""

    def __init__(self, cls, shape=None, typecode=None):
        del shape, typecode  # numpy's placeholders, replaced by the state
        if cls is not _NDARRAY:
            refuse("the file rebuilds an array of a class other than numpy.ndarray")
        self.array = None

    def build(self, state):
        if type(state) is not tuple or len(state) != 5 or type(state[0]) is not int or state[0] != 1:
            refuse("the file gives an array a state numpy never writes")
        _, shape, dtype, fortran, data = state
        if type(fortran) is not bool:
            refuse("the file gives an array a state numpy never writes")
        self.array = from_bytes(data, dtype, shape, "F" if fortran else "C")


def _plain_dtype(dtype):
    """`dtype` as numpy's, when it is one this loader made (a plain number)."""
    if isinstance(dtype, _Dtype):
        return dtype.numpy()
    if type(dtype) is np.dtype or isinstance(dtype, np.dtype):
        if dtype.fields is None and dtype.subdtype is None and dtype.str[1:] in PLAIN_DTYPES:
            return dtype
    refuse("the file gives an array something other than a plain dtype")


def from_bytes(data, dtype, shape, order):
    """A fresh native-order array of `shape` from `data`, after checking every part."""
    dt = _plain_dtype(dtype)
    if type(shape) is not tuple or len(shape) > 64 or not all(type(n) is int and n >= 0 for n in shape):
        refuse("the file gives an array a shape that is not a tuple of at most 64 sizes")
    if type(data) not in (bytes, bytearray):
        refuse("the file gives an array elements that are not raw bytes")
    if math.prod(shape) * dt.itemsize != len(data):
        refuse(f"the file gives an array of shape {shape} and dtype {dt} {len(data)} bytes")
    if len(data) == 0:
        return np.zeros(shape, dtype=dt.newbyteorder("="))
    values = np.frombuffer(data, dtype=dt).reshape(shape, order=order)
    return values.astype(dt.newbyteorder("="), order="C", copy=True)


def _frombuffer(buffer, dtype, shape, order):
    """numpy's ``_frombuffer``, which pickle protocol 5 writes (buffers in band only)."""
    if type(order) is not str or order not in ("C", "F"):
        refuse("the file gives an array an order numpy never writes")
    return from_bytes(buffer, dtype, shape, order)


def _scalar(dtype, data):
    """numpy's ``scalar(dtype, bytes)`` (a pickled ``np.float32(2.0)``)."""
    return from_bytes(data, dtype, (), "C")[()]


def _tensor(values, dtype=None, requires_grad=False):
    """``ferrograd._core.tensor`` as a pickled tensor calls it: from an array only."""
    if type(values) is not np.ndarray or dtype is not None or type(requires_grad) is not bool:
        refuse("the file builds a tensor from something other than a saved array")
    return _core.tensor(values, None, requires_grad)


def _frozen_leaf(values):
    """``ferrograd.serialization._frozen_leaf`` (a pickled frozen parameter), from an array
    only."""
    from .serialization import _frozen_leaf as frozen  # serialization imports this module

    if type(values) is not np.ndarray:
        refuse("the file builds a parameter from something other than a saved array")
    return frozen(values)


def _encode(text, encoding):
    """``_codecs.encode(text, "latin1")``: how protocols 0 to 2 write bytes."""
    if type(text) is not str or encoding not in ("latin1", "latin-1") or any(ord(c) > 255 for c in text):
        refuse("the file calls _codecs.encode with arguments pickle never writes")
    return text.encode("latin1")


def _bytes(*args):
    """``bytes()``: how protocols 0 to 2 write empty bytes."""
    if args:
        refuse("the file calls bytes with arguments pickle never writes")
    return b""


def _bytearray(data=b"", encoding=None):
    """``bytearray(bytes)``, or ``bytearray(text, "latin-1")`` as protocols 0 to 2 write it."""
    if type(data) is str and encoding in ("latin1", "latin-1"):
        data = _encode(data, "latin1")
    elif type(data) is not bytes or encoding is not None:
        refuse("the file calls bytearray with arguments pickle never writes")
    return bytearray(data)


def _collection(kind):
    def build(items=()):
        if type(items) is not list:
            refuse(f"the file calls {kind.__name__} with arguments pickle never writes")
        return kind(items)

    build.__name__ = kind.__name__
    return build


_NAMED_TUPLES = {getattr(return_types, n) for n in ("topk", "max", "min", "sort")}


def _reconstructor(cls, base, state):
    """``copyreg._reconstructor``: how protocols 0 and 1 write a named tuple."""
    if cls not in _NAMED_TUPLES or base is not tuple or type(state) is not tuple:
        refuse("the file calls copyreg._reconstructor with arguments pickle never writes")
    return cls(*state)


def _ordered_dict(items=()):
    if items != () and type(items) is not list:
        refuse("the file calls OrderedDict with arguments pickle never writes")
    return collections.OrderedDict(items)


# Each name a checkpoint may refer to, and what it is here. Python 2 spellings are those
# that protocols 0 to 2 write.
_NUMPY = ("numpy._core.multiarray", "numpy.core.multiarray")
_BUILTINS = ("builtins", "__builtin__")
NAMES = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("ferrograd._core", "tensor"): _tensor,
    ("ferrograd.serialization", "_frozen_leaf"): _frozen_leaf,
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Dtype,
    ("_codecs", "encode"): _encode,
    **{(m, "_reconstruct"): _Array for m in _NUMPY},
    **{(m, "scalar"): _scalar for m in _NUMPY},
    **{(m, "_frombuffer"): _frombuffer for m in ("numpy._core.numeric", "numpy.core.numeric")},
    **{(m, "_reconstructor"): _reconstructor for m in ("copyreg", "copy_reg")},
    **{(b, "bytes"): _bytes for b in _BUILTINS},
    **{(b, "bytearray"): _bytearray for b in _BUILTINS},
    **{(b, "set"): _collection(set) for b in _BUILTINS},
    **{(b, "frozenset"): _collection(frozenset) for b in _BUILTINS},
    **{(b, "tuple"): tuple for b in _BUILTINS},
    **{("ferrograd.return_types", t.__name__): t for t in _NAMED_TUPLES},
}
_CALLABLE = {id(v) for v in NAMES.values() if v is not _NDARRAY and v is not tuple}
_NAMED = {id(v) for v in NAMES.values()}


class _Args(tuple):
    """A tuple that holds a name (a class or function): good only as a call's arguments."""


class _Loader:
    """The interpreter: a stack with marks and a memo, as pickle's, over parsed opcodes.
    Stand-ins become their arrays and dtypes wherever a value is taken (into a container, a
    call or the result), so none is ever returned."""

    def __init__(self):
        self.stack, self.marks, self.memo = [], [], {}
        # Depths of the tuples and frozensets built so far, by id; `kept` holds each of them
        # so that no id is reused while the load runs.
        self.depth, self.kept = {}, []

    # ---- values ----

    def value(self, v):
        """`v` as a container or the result may hold it."""
        if isinstance(v, (_Array, _Dtype)):
            if isinstance(v, _Dtype):
                return v.numpy()
            if v.array is None:
                refuse("the file uses an array before giving it its contents")
            return v.array
        if id(v) in _NAMED or type(v) is _Args:
            refuse("the file uses a class or function as a value")
        return v

    def key(self, k):
        k = self.value(k)
        try:
            hash(k)
        except TypeError:
            refuse(f"the file uses an unhashable {type(k).__name__} as a key")
        return k

    def pop_mark(self):
        if not self.marks:
            refuse("the file has no MARK where one is needed")
        at = self.marks.pop()
        items, self.stack[at:] = self.stack[at:], []
        return items

    def pop(self):
        if not self.stack:
            refuse("the file pops an empty stack")
        return self.stack.pop()

    def top(self, kind):
        if not self.stack or not isinstance(self.stack[-1], kind):
            refuse(f"the file adds items to something other than a {kind.__name__}")
        return self.stack[-1]

    def tuple_of(self, items):
        """A tuple (an `_Args` when it holds a name)."""
        named = any(id(v) in _NAMED for v in items)
        values = [v if id(v) in _NAMED else self.value(v) for v in items]
        return self.nested(_Args(values) if named else tuple(values))

    def nested(self, obj):
        """`obj`, its depth recorded when it is a tuple or frozenset (whichever opcode or call
        made it): one deeper than its deepest item of those kinds."""
        if isinstance(obj, (tuple, frozenset)):
            inner = (self.depth.get(id(v), 0) for v in obj if isinstance(v, (tuple, frozenset)))
            depth = 1 + max(inner, default=0)
            if depth > MAX_DEPTH:
                refuse(f"the file nests tuples more than {MAX_DEPTH} deep")
            self.depth[id(obj)] = depth
            self.kept.append(obj)
        return obj

    # ---- calls ----

    def call(self, func, args):
        if id(func) not in _CALLABLE or not isinstance(args, tuple):
            refuse("the file calls something other than the functions a checkpoint uses")
        return self.nested(func(*args))

    def build(self):
        state, obj = self.value(self.pop()), self.pop()
        if not isinstance(obj, (_Array, _Dtype)):
            refuse(f"the file sets the state of a {type(obj).__name__}")
        obj.build(state)
        self.stack.append(obj)

    def new_object(self, cls, args, kwargs=None):
        if cls not in _NAMED_TUPLES or not isinstance(args, tuple) or kwargs:
            refuse("the file creates an object of a class other than the named tuples")
        return self.nested(cls(*args))

    def named(self, module, name):
        if type(module) is not str or type(name) is not str or (module, name) not in NAMES:
            refuse(f"the file refers to {module}.{name}")
        return NAMES[(module, name)]

    # ---- opcodes ----

    def run(self, stream):
        try:
            for op, arg, _ in pickletools.genops(stream):
                if op.name == "STOP":
                    return self.value(self.pop())
                handler = _OPS.get(op.name)
                if handler is None:
                    refuse(f"the file uses the opcode {op.name}")
                handler(self, arg)
        except pickle.UnpicklingError:
            raise
        except (ValueError, TypeError, OverflowError, MemoryError, RecursionError, KeyError, IndexError) as e:
            raise pickle.UnpicklingError(f"load: a malformed or hostile pickle ({type(e).__name__}: {e})") from e
        refuse("the file ends without STOP")


def _push(loader, arg):
    loader.stack.append(arg)


def _last(loader, n):
    """The top `n` items, in the order they were pushed."""
    items = [loader.pop() for _ in range(n)]
    return items[::-1]


def _dup(loader, _):
    if not loader.stack:
        refuse("the file duplicates the top of an empty stack")
    loader.stack.append(loader.stack[-1])


def _additems(loader, _):
    keys = [loader.key(v) for v in loader.pop_mark()]
    loader.top(set).update(keys)


def _append(loader, values):
    loader.top(list).extend([loader.value(v) for v in values])


def _memo_put(loader, index):
    if not loader.stack:
        refuse("the file memoizes an empty stack")
    loader.memo[index] = loader.stack[-1]


def _memo_get(loader, index):
    if index not in loader.memo:
        refuse(f"the file refers to memo entry {index}, which it never wrote")
    loader.stack.append(loader.memo[index])


def _setitems(loader, pairs):
    d = loader.top(dict)
    for k, v in pairs:
        d[loader.key(k)] = loader.value(v)


def _pairs(items):
    if len(items) % 2:
        refuse("the file gives a dict an odd number of keys and values")
    return list(zip(items[::2], items[1::2]))


def _extension(loader, code):
    found = copyreg._inverted_registry.get(code)
    if found is None:
        refuse(f"the file uses the unregistered extension code {code}")
    loader.stack.append(loader.named(*found))


def _stack_global(loader, _):
    name, module = loader.pop(), loader.pop()
    loader.stack.append(loader.named(module, name))


def _global(loader, arg):
    module, _, name = arg.partition(" ")
    loader.stack.append(loader.named(module, name))


def _reduce(loader, _):
    args, func = loader.pop(), loader.pop()
    loader.stack.append(loader.call(func, args))


def _new_object(loader, _):
    args, cls = loader.pop(), loader.pop()
    loader.stack.append(loader.new_object(cls, args))


def _new_object_ex(loader, _):
    kwargs, args, cls = loader.pop(), loader.pop(), loader.pop()
    loader.stack.append(loader.new_object(cls, args, kwargs))


def _frozenset(loader, _):
    items = [loader.key(v) for v in loader.pop_mark()]
    loader.stack.append(loader.nested(frozenset(items)))


_OPS = {
    **{name: lambda ld, _: None for name in ("PROTO", "FRAME")},
    **{
        name: _push
        for name in (
            "INT",
            "BININT",
            "BININT1",
            "BININT2",
            "LONG",
            "LONG1",
            "LONG4",
            "FLOAT",
            "BINFLOAT",
            "STRING",
            "BINSTRING",
            "SHORT_BINSTRING",
            "UNICODE",
            "BINUNICODE",
            "SHORT_BINUNICODE",
            "BINUNICODE8",
            "BINBYTES",
            "SHORT_BINBYTES",
            "BINBYTES8",
        )
    },
    "NONE": lambda ld, _: ld.stack.append(None),
    "NEWTRUE": lambda ld, _: ld.stack.append(True),
    "NEWFALSE": lambda ld, _: ld.stack.append(False),
    "BYTEARRAY8": lambda ld, arg: ld.stack.append(bytearray(arg)),
    "MARK": lambda ld, _: ld.marks.append(len(ld.stack)),
    "POP": lambda ld, _: ld.pop(),
    "POP_MARK": lambda ld, _: ld.pop_mark(),
    "DUP": _dup,
    **{name: _memo_put for name in ("PUT", "BINPUT", "LONG_BINPUT")},
    "MEMOIZE": lambda ld, _: _memo_put(ld, len(ld.memo)),
    **{name: _memo_get for name in ("GET", "BINGET", "LONG_BINGET")},
    "EMPTY_LIST": lambda ld, _: ld.stack.append([]),
    "EMPTY_DICT": lambda ld, _: ld.stack.append({}),
    "EMPTY_SET": lambda ld, _: ld.stack.append(set()),
    "EMPTY_TUPLE": lambda ld, _: ld.stack.append(()),
    "LIST": lambda ld, _: ld.stack.append([ld.value(v) for v in ld.pop_mark()]),
    "APPEND": lambda ld, _: _append(ld, _last(ld, 1)),
    "APPENDS": lambda ld, _: _append(ld, ld.pop_mark()),
    "TUPLE": lambda ld, _: ld.stack.append(ld.tuple_of(ld.pop_mark())),
    **{f"TUPLE{n}": (lambda k: lambda ld, _: ld.stack.append(ld.tuple_of(_last(ld, k))))(n) for n in (1, 2, 3)},
    "DICT": lambda ld, _: ld.stack.append({ld.key(k): ld.value(v) for k, v in _pairs(ld.pop_mark())}),
    "SETITEM": lambda ld, _: _setitems(ld, [_last(ld, 2)]),
    "SETITEMS": lambda ld, _: _setitems(ld, _pairs(ld.pop_mark())),
    "ADDITEMS": _additems,
    "FROZENSET": _frozenset,
    "GLOBAL": _global,
    "STACK_GLOBAL": _stack_global,
    **{name: _extension for name in ("EXT1", "EXT2", "EXT4")},
    "REDUCE": _reduce,
    "NEWOBJ": _new_object,
    "NEWOBJ_EX": _new_object_ex,
    "BUILD": lambda ld, _: ld.build(),
}


def load(stream):
    """The object the weights-only pickle in `stream` holds."""
    return _Loader().run(stream)
