"""Checkpoints against an attacker and against crashes. ``fg.load`` with weights_only (the
default) refuses every pickle that would run code or let numpy read attacker bytes as
pointers, built here by hand; ``fg.save`` never leaves a checkpoint half-written or lost."""

import collections
import copyreg
import io
import os
import pickle
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import ferrograd as fg

NUMPY_CORE = np._core.multiarray.__name__ if hasattr(np, "_core") else np.core.multiarray.__name__


class Reduce:
    """Pickles as the reduce tuple it is given: how the hostile pickles below are written."""

    def __init__(self, *reduce):
        self.reduce = reduce

    def __reduce__(self):
        return self.reduce


def _reconstruct():
    return sys.modules[NUMPY_CORE]._reconstruct


def array_pickle(dtype_reduce, shape, data):
    """numpy's own pickle of an array, with the dtype's reduce tuple and bytes chosen."""
    dtype = Reduce(*dtype_reduce)
    return pickle.dumps(Reduce(_reconstruct(), (np.ndarray, (0,), b"b"), (1, shape, dtype, False, data)), protocol=4)


def refused(data, match="weights_only"):
    with pytest.raises(pickle.UnpicklingError, match=match):
        fg.load(_bytes_file(data))


def _bytes_file(data):
    return io.BytesIO(data)


def test_an_object_field_hidden_in_a_void_dtype_is_refused_without_a_crash(tmp_path):
    # The dtype's BUILD state gives V8 an object field while its flags claim no objects: numpy
    # would read the chosen bytes as a pointer. Loaded in a child so that a crash is a failure
    # here, not the end of the suite.
    obj = np.dtype("O")
    evil = array_pickle(
        (np.dtype, ("V8", False, True), (3, "|", None, ("f",), {"f": (obj, 0)}, 8, 1, 0)),
        (1,),
        b"\x41" * 8,
    )
    (tmp_path / "evil.pt").write_bytes(evil)
    code = f"""
        import pickle, ferrograd as fg
        try:
            a = fg.load({str(tmp_path / "evil.pt")!r})
            print(repr(a))
        except pickle.UnpicklingError as e:
            print("refused:", e)
    """
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, f"the loader died with {run.returncode}: {run.stderr}"
    assert run.stdout.startswith("refused:") and "V8" in run.stdout, run.stdout


def test_a_plain_dtype_given_fields_or_flags_by_its_state_is_refused():
    fields = (3, "|", None, ("f",), {"f": (np.dtype("f8"), 0)}, 8, 1, 0)
    refused(array_pickle((np.dtype, ("f8", False, True), fields), (1,), b"\0" * 8), "fields")
    flags = (3, "<", None, None, None, -1, -1, 63)  # NPY_ITEM_REFCOUNT and more
    refused(array_pickle((np.dtype, ("f8", False, True), flags), (1,), b"\0" * 8), "flags")
    refused(
        array_pickle((np.dtype, ("O8", False, True), (3, "|", None, None, None, -1, -1, 63)), (1,), b"\0" * 8), "O8"
    )


def test_object_structured_and_subarray_arrays_are_refused():
    refused(pickle.dumps(np.array([1, "a"], dtype=object)), "'O")
    refused(pickle.dumps(np.zeros(2, dtype=[("a", "f4"), ("b", "i8")])), "V12")
    refused(pickle.dumps(np.zeros(2, dtype=[("a", "f4", (3,))])), "V12")
    refused(pickle.dumps(np.array(["ab"])), "U2")


def test_an_array_whose_bytes_do_not_fit_its_shape_is_refused():
    f4 = np.dtype("f4").__reduce__()
    refused(array_pickle(f4, (10,), b"\0" * 4), "bytes")
    refused(array_pickle(f4, (2**62, 2**62), b"\0" * 4), "bytes")
    refused(array_pickle(f4, (-1,), b"\0" * 4), "shape")
    refused(array_pickle(f4, (1,), [1.0]), "raw bytes")


def test_an_array_used_before_its_contents_is_refused():
    unbuilt = Reduce(_reconstruct(), (np.ndarray, (0,), b"b"))
    refused(pickle.dumps(Reduce(fg._core.tensor, (unbuilt, None, False)), protocol=4), "before")
    refused(pickle.dumps(Reduce(_reconstruct(), (collections.OrderedDict, (0,), b"b"))), "class")


def test_pickles_that_run_code_are_refused_before_they_run(tmp_path):
    marker = tmp_path / "ran"
    command = f"touch {marker}"
    # GLOBAL os.system, the command, TUPLE1, REDUCE, STOP: written opcode by opcode.
    raw = b"cposix\nsystem\n" + pickle.dumps(command, protocol=0)[:-2] + b"\x85R."
    refused(raw, "posix.system")
    refused(pickle.dumps(Reduce(os.system, (command,)), protocol=2), "system")
    refused(pickle.dumps(Reduce(eval, (f"__import__('os').system({command!r})",))), "builtins.eval")
    # getattr chains: by the builtin, and by a dotted name on an allowed class.
    refused(pickle.dumps(Reduce(getattr, (collections.OrderedDict, "fromkeys"))), "builtins.getattr")
    dotted = b"".join(b"\x8c" + bytes([len(s)]) + s for s in (b"collections", b"OrderedDict.__init__.__globals__"))
    refused(b"\x80\x04" + dotted + b"\x93.", "OrderedDict.__init__")
    # A reduce nested deep inside plain containers.
    nested = {"model": {"w": fg.ones(2)}, "extra": [1, (2, Reduce(os.system, (command,)))]}
    refused(pickle.dumps(nested, protocol=4), "system")
    # An extension code that the reader's copyreg maps to os.system.
    copyreg.add_extension("posix", "system", 240)
    try:
        ext = pickle.dumps(os.system, protocol=2)
        assert b"\x82\xf0" in ext  # EXT1 240
        refused(ext + b"", "posix.system")
    finally:
        copyreg.remove_extension("posix", "system", 240)
    # A persistent id, which the default unpickler would hand to persistent_load.
    refused(b"\x80\x02Pabc\n.", "PERSID")
    assert not marker.exists()


def test_numpy_arrays_tensors_and_containers_load_as_they_were_saved():
    arrays = {
        "f4": np.arange(6, dtype=np.float32).reshape(2, 3),
        "fortran": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
        "big_endian": np.arange(3, dtype=">i4"),
        "flags": np.array([True, False]),
        "u8": np.array([2**64 - 1], dtype=np.uint64),
        "empty": np.zeros((0, 3), np.float16),
        "scalar": np.float32(2.5),
        "i64": np.int64(-(2**62)),
    }
    frozen = fg.ones(2, requires_grad=True)
    frozen.requires_grad = False
    shared = [1, 2]
    obj = {
        "arrays": arrays,
        "tensors": collections.OrderedDict(w=fg.tensor([[1.0, 2.0]], requires_grad=True), n=fg.arange(3)),
        "frozen": frozen,
        "top": fg.tensor([3.0, 1.0, 2.0]).topk(2),
        "shared": (shared, shared),
        "misc": [None, True, 3, 2.5, "s", b"b", {1, 2}],
    }
    for protocol in (2, 4, 5):
        back = fg.load(_bytes_file(pickle.dumps(obj, protocol=protocol)))
        for k, a in arrays.items():
            assert type(back["arrays"][k]) is type(a) and back["arrays"][k].dtype == a.dtype.newbyteorder("=")
            np.testing.assert_array_equal(back["arrays"][k], a)
        assert back["tensors"]["w"].requires_grad and back["tensors"]["w"].tolist() == [[1.0, 2.0]]
        assert back["tensors"]["n"].dtype == fg.int64
        assert back["frozen"].is_parameter and not back["frozen"].requires_grad
        assert type(back["top"]).__name__ == "topk" and back["top"].indices.tolist() == [0, 2]
        assert back["shared"][0] is back["shared"][1]
        assert back["misc"] == obj["misc"]
    cyclic = [1]
    cyclic.append(cyclic)
    back = fg.load(_bytes_file(pickle.dumps(cyclic)))
    assert back[1] is back


def test_a_save_that_fails_leaves_the_old_checkpoint(tmp_path):
    path = tmp_path / "ckpt.pt"
    fg.save({"epoch": 1, "w": [fg.ones(2)]}, path)
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        fg.save({"epoch": 2, "fn": lambda x: x}, path)
    assert fg.load(path)["epoch"] == 1
    assert os.listdir(tmp_path) == ["ckpt.pt"]


def test_a_save_keeps_the_mode_and_writes_through_a_symlink(tmp_path):
    for obj in ({"epoch": 1}, {"w": fg.ones(2)}):  # pickle, then safetensors
        target = tmp_path / "runs" / "best.pt"
        target.parent.mkdir(exist_ok=True)
        fg.save(obj, target)
        os.chmod(target, 0o600)
        link = tmp_path / "latest.pt"
        if not link.is_symlink():
            link.symlink_to("runs/best.pt")
        fg.save(obj, link)
        assert link.is_symlink() and stat.S_IMODE(os.stat(target).st_mode) == 0o600
        assert sorted(fg.load(target)) == sorted(obj)


def test_a_tensor_named_like_the_safetensors_metadata_key_is_refused(tmp_path):
    path = tmp_path / "sd.safetensors"
    fg.save({"w": fg.ones(2)}, path)
    with pytest.raises(ValueError, match="__metadata__"):
        fg.save({"w": fg.zeros(2), "__metadata__": fg.zeros(1)}, path)
    assert fg.load(path)["w"].tolist() == [1.0, 1.0]


def test_a_save_killed_midway_leaves_a_whole_checkpoint(tmp_path):
    path = tmp_path / "ckpt.pt"
    code = f"""
        import ferrograd as fg, numpy as np
        big = [fg.tensor(np.full(1 << 20, float(i), np.float32)) for i in range(16)]
        epoch = 0
        fg.save({{"epoch": epoch, "w": big}}, {str(path)!r})
        print("saved", flush=True)
        while True:
            epoch += 1
            fg.save({{"epoch": epoch, "w": big}}, {str(path)!r})
    """
    for delay in (0.05, 0.2, 0.4, 0.7):
        child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "saved\n"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        back = fg.load(path)
        assert back["epoch"] >= 0 and len(back["w"]) == 16 and back["w"][15][0].item() == 15.0


# ---- opcode by opcode: what a hostile file writes that no pickler would ----


def S(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def int32_op(n):
    return b"J" + struct.pack("<i", n)


def G(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def T(*items):
    return b"(" + b"".join(items) + b"t"


def D(*items):
    return b"(" + b"".join(items) + b"d"


F4 = G("numpy", "dtype") + T(S("f4"), b"\x89", b"\x88") + b"R"
BUILT = (
    G("numpy.core.numeric", "_frombuffer") + T(b"B\x04\x00\x00\x00\x00\x00\x00\x00", F4, T(int32_op(1)), S("C")) + b"R"
)
# An object whose __array_interface__ points numpy at an address the file chooses.
INTERFACE = D(
    S("shape"),
    T(int32_op(4096)),
    S("typestr"),
    S("|u1"),
    S("data"),
    T(int32_op(0x10000), b"\x89"),
    S("version"),
    int32_op(3),
)
POINTER = G("numpy", "ndarray") + b")\x81" + D(S("__array_interface__"), INTERFACE) + b"b"


def load_in_child(payload):
    """`fg.load` of `payload` in a process of its own: what it printed, or its crash."""
    code = """
import io, pickle, sys, ferrograd as fg
try:
    print("loaded", type(fg.load(io.BytesIO(sys.stdin.buffer.read()))).__name__)
except pickle.UnpicklingError as e:
    print("refused:", e)
"""
    run = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, timeout=120)
    run.stdout, run.stderr = run.stdout.decode(), run.stderr.decode()
    assert run.returncode == 0, f"the loader died with {run.returncode}: {run.stderr[-500:]}"
    return run.stdout


def test_build_on_anything_but_numpys_stand_ins_is_refused():
    # Each once read memory at an address of the file's choosing (or crashed there).
    attacks = {
        "state on a built array": b"\x80\x02"
        + G("ferrograd._core", "tensor")
        + T(BUILT + D(S("array"), POINTER) + b"b", b"N", b"\x89")
        + b"R.",
        "a new ndarray": b"\x80\x02" + POINTER + b".",
        "a tensor's data": b"\x80\x02"
        + G("ferrograd._core", "tensor")
        + T(BUILT, b"N", b"\x89")
        + b"R"
        + T(b"N", D(S("data"), POINTER))
        + b"b.",
        "a class's attributes": b"\x80\x02"
        + G("ferrograd.return_types", "topk")
        + T(b"N", D(S("values"), int32_op(1337)))
        + b"b.",
        "an ordered dict's attributes": b"\x80\x02"
        + G("collections", "OrderedDict")
        + b")R"
        + D(S("x"), int32_op(5))
        + b"b.",
        "a function's defaults": b"\x80\x02"
        + G("builtins", "set")
        + T(b"N", D(S("__defaults__"), T(int32_op(5))))
        + b"b.",
    }
    for what, payload in attacks.items():
        out = load_in_child(payload)
        assert out.startswith("refused:"), f"{what}: {out}"
    assert fg.tensor([3.0, 1.0, 2.0]).topk(2).values.tolist() == [3.0, 2.0]


def test_names_are_values_only_as_arguments_and_stand_ins_never_escape():
    for payload in (
        b"\x80\x02" + G("numpy", "dtype") + b".",  # a class as the result
        b"\x80\x02" + b"\x8f(" + T(G("numpy", "ndarray")) + b"\x90.",  # in a set, in a tuple
        b"\x80\x02" + D(T(F4), int32_op(1)) + b".",  # a dtype in a tuple as a key: numpy's, plain
    ):
        try:
            back = fg.load(io.BytesIO(payload))
        except pickle.UnpicklingError:
            continue
        assert back == {(np.dtype("<f4"),): 1}


def test_deep_tuples_and_memo_tricks_cost_no_crash_and_no_memory():
    # Hashing a 200,000-deep tuple as a dict key overflows C's stack in plain pickle.
    deep = b"\x80\x02}" + b")" + b"\x85" * 200_000 + int32_op(1) + b"s."
    assert "nests tuples" in load_in_child(deep)
    # The same depth reached through named tuples built by NEWOBJ every 900 levels.
    wrapped = bytearray(b"\x80\x04" + G("ferrograd.return_types", "topk") + b"q\x000})")
    for k in range(11, 344):
        wrapped += b"\x85" * 900 + b"q\x010h\x00h\x01N\x86r" + k.to_bytes(4, "little") + b"\x81"
    assert "nests tuples" in load_in_child(bytes(wrapped + b"Ns."))
    # A 9-byte file that makes pickle's memo table 2^28 entries long (4 GB).
    code = (
        "import io, resource, ferrograd as fg; "
        "print(fg.load(io.BytesIO(b'\\x80\\x02Nr\\x00\\x00\\x00\\x10.')), "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    value, megabytes = run.stdout.split()
    assert value == "None" and int(megabytes) < 1000, run.stdout


def test_every_failure_is_an_unpickling_error():
    f4 = np.dtype("f4").__reduce__()
    for payload in (
        array_pickle(f4, (0, 2**62, 2**62), b""),  # numpy: "array is too big"
        array_pickle(f4, (1,) * 65, b"\0" * 4),  # more axes than numpy has
        b"\x80\x02" + G("numpy", "dtype") + b")R.",  # dtype() without a name
        b"\x80\x02" + G("_codecs", "encode") + T(S("\u20ac"), S("latin1")) + b"R.",
        b"\x80\x02\x82\x01.",  # an extension code nobody registered
        b"\x80\x02(N",  # no STOP
    ):
        refused(payload, "load:")


def test_protocols_0_to_2_of_named_tuples_frozensets_and_bytearrays_load():
    top = fg.tensor([3.0, 1.0, 2.0]).topk(2)
    for protocol in range(6):
        back = fg.load(io.BytesIO(pickle.dumps([top, frozenset({1, 2}), bytearray(b"ab")], protocol=protocol)))
        assert type(back[0]).__name__ == "topk" and back[0].indices.tolist() == [0, 2]
        assert back[1:] == [frozenset({1, 2}), bytearray(b"ab")]
