"""TVM's object-graph metadata JSON (as TVM's Relay printer wrote it) decodes to constants."""
from __future__ import annotations

import base64
import struct

import numpy as np
import pytest

from relay_ir.tvm_metadata import DLTENSOR_MAGIC, decode_dltensor, decode_tvm_metadata

# A blob from a module printed by TVM 0.8: a (2, 3) float32 tensor holding 1..6.
TVM08_BLOB = ("P6G0lvBAXt0AAAAAAAAAAAEAAAAAAAAAAgAAAAIgAQACAAAAAAAAAAMAAAAAAAAAGAAAAAAAAAAAAIA/"
              "AAAAQAAAQEAAAIBAAACgQAAAwEA=")


def _blob(a: np.ndarray, code: int, bits: int) -> bytes:
    head = struct.pack("<QQiii", DLTENSOR_MAGIC, 0, 1, 0, a.ndim)
    head += struct.pack("<BBH", code, bits, 1)
    head += struct.pack(f"<{a.ndim}q", *a.shape)
    raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
    return head + struct.pack("<q", len(raw)) + raw


def test_real_tvm_blob() -> None:
    a = decode_dltensor(base64.b64decode(TVM08_BLOB))
    assert a.dtype == np.float32 and a.shape == (2, 3)
    np.testing.assert_array_equal(a, np.arange(1, 7, dtype="float32").reshape(2, 3))


@pytest.mark.parametrize("dtype,code,bits", [("int8", 0, 8), ("uint16", 1, 16),
                                             ("float16", 2, 16), ("float64", 2, 64),
                                             ("int64", 0, 64), ("bool", 1, 1)])
def test_dtypes_round_trip(dtype: str, code: int, bits: int) -> None:
    a = (np.arange(12).reshape(3, 4) % 3).astype(dtype)
    np.testing.assert_array_equal(decode_dltensor(_blob(a, code, bits)), a)


def test_bad_blobs() -> None:
    good = _blob(np.zeros((2,), "float32"), 2, 32)
    with pytest.raises(ValueError, match="magic"):
        decode_dltensor(b"\0" * 8 + good[8:])
    with pytest.raises(ValueError, match="truncated|bytes"):
        decode_dltensor(good[:-1])
    with pytest.raises(ValueError, match="unsupported tensor dtype"):
        decode_dltensor(good[:28] + struct.pack("<BBH", 4, 16, 1) + good[32:])


def test_decode_object_graph() -> None:
    obj = {"root": 1, "nodes": [
        {"type_key": ""},
        {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
        {"type_key": "Array", "data": [3, 4]},
        {"type_key": "relay.Constant", "attrs": {"data": "0", "span": "0"}},
        {"type_key": "relay.Constant", "attrs": {"data": "1", "span": "0"}}],
        "b64ndarrays": [TVM08_BLOB, base64.b64encode(
            _blob(np.array(7, "int32"), 0, 32)).decode()],
        "attrs": {"tvm_version": "0.8.0"}}
    table = decode_tvm_metadata(obj)
    first, second = table["relay.Constant"]
    assert first.shape == (2, 3) and float(first[1, 2]) == 6.0
    assert second.shape == () and second.dtype == np.int32 and int(second) == 7
    obj["nodes"][2]["data"] = [3, 9]
    with pytest.raises(ValueError, match="out of range"):
        decode_tvm_metadata(obj)


TVM_PRINTED = '''#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
  add(%x, meta[relay.Constant][0] /* ty=Tensor[(2, 3), float32] */) /* ty=Tensor[(2, 3), float32] */
}

#[metadata]
{
  "root": 1,
  "nodes": [
    {"type_key": ""},
    {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
    {"type_key": "Array", "data": [3]},
    {"type_key": "relay.Constant", "attrs": {"_checked_type_": "0", "data": "0", "span": "0"}}
  ],
  "b64ndarrays": ["BLOB"],
  "attrs": {"tvm_version": "0.8.0"}
}
'''.replace("BLOB", TVM08_BLOB)


def test_parse_module_printed_by_tvm() -> None:
    import relay_ir as rly
    from relay_ir import runtime
    mod = rly.parse(TVM_PRINTED)
    x = np.full((2, 3), 10, "float32")
    out = runtime.evaluate(mod, x)
    np.testing.assert_array_equal(out, x + np.arange(1, 7, dtype="float32").reshape(2, 3))
    # printed back in relay_ir's own metadata format, and read again to the same module
    rly.assert_structural_equal(rly.parse(rly.astext(mod)), mod)


def test_corrupt_tvm_metadata_is_a_parse_error() -> None:
    import relay_ir as rly
    truncated = base64.b64encode(base64.b64decode(TVM08_BLOB)[:-4]).decode()
    bad = TVM_PRINTED.replace(TVM08_BLOB, truncated)
    with pytest.raises(rly.ParseError, match="malformed TVM metadata section") as ei:
        rly.parse(bad)
    assert ei.value.span is not None and ei.value.span.line == 6
