"""Reading the ``#[metadata]`` section that TVM's own Relay printer wrote.

TVM serialized the metadata table as its generic object-graph JSON::

    {"root": 1,
     "nodes": [{"type_key": ""},
               {"type_key": "Map", "keys": ["relay.Constant"], "data": [2]},
               {"type_key": "Array", "data": [3]},
               {"type_key": "relay.Constant", "attrs": {"data": "0", ...}}],
     "b64ndarrays": ["<base64 DLTensor>"],
     "attrs": {"tvm_version": "0.8.0"}}

Node indices are stringified in ``attrs`` and plain in ``data``; a constant's ``data`` attr
indexes ``b64ndarrays``. Each blob is a serialized DLTensor: u64 magic ``0xDD5E40F096B4A13F``,
u64 reserved, device (i32 type, i32 id), i32 ndim, dtype (u8 code, u8 bits, u16 lanes),
i64 shape[ndim], i64 byte size, then the little-endian data.

Tensor constants (``relay.Constant``) are decoded to arrays and ``VirtualDevice`` nodes to
dicts (``device_type_int``, ``virtual_device_id``, ``memory_scope``; the target is not kept);
entries of other type keys are kept as ``None`` so that indices stay right, and using one is
reported by the parser. :class:`MetaRef` is an attribute value that refers to an entry.
"""
from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DLTENSOR_MAGIC = 0xDD5E40F096B4A13F
_DTYPE_CODES = {0: "int", 1: "uint", 2: "float"}


@dataclass(frozen=True, slots=True)
class MetaRef:
    """An attribute value ``meta[key][index]``: a metadata entry, printed back as written.

    Equality and hashing use ``key`` and ``index`` only; ``value`` is the entry (a JSON value,
    or whatever the ``metadata=`` argument of the parser supplied).
    """

    key: str
    index: int
    value: Any = field(default=None, compare=False, hash=False)

    def __str__(self) -> str:
        return f"meta[{self.key}][{self.index}]"


def is_tvm_metadata(obj: Any) -> bool:
    """True if ``obj`` (parsed JSON) looks like TVM's object-graph metadata."""
    return isinstance(obj, dict) and "root" in obj and "nodes" in obj


def decode_dltensor(blob: bytes) -> np.ndarray:
    """A numpy array from one serialized DLTensor; raises ValueError when malformed."""
    if len(blob) < 32:
        raise ValueError("tensor blob is truncated")
    magic, _reserved = struct.unpack_from("<QQ", blob, 0)
    if magic != DLTENSOR_MAGIC:
        raise ValueError("tensor blob does not start with the DLTensor magic number")
    _dev_type, _dev_id, ndim = struct.unpack_from("<iii", blob, 16)
    code, bits, lanes = struct.unpack_from("<BBH", blob, 28)
    if not 0 <= ndim <= 32:
        raise ValueError(f"tensor blob has an implausible rank {ndim}")
    off = 32
    if len(blob) < off + 8 * ndim + 8:
        raise ValueError("tensor blob is truncated")
    shape = struct.unpack_from(f"<{ndim}q", blob, off)
    off += 8 * ndim
    (nbytes,) = struct.unpack_from("<q", blob, off)
    off += 8
    if lanes != 1:
        raise ValueError(f"vector dtypes (lanes={lanes}) are not supported in constants")
    if code == 1 and bits == 1:
        dtype = np.dtype("bool")
    elif code in _DTYPE_CODES and bits in (8, 16, 32, 64):
        dtype = np.dtype(f"{_DTYPE_CODES[code]}{bits}")
    else:
        raise ValueError(f"unsupported tensor dtype (code {code}, {bits} bits)")
    if any(d < 0 for d in shape):
        raise ValueError(f"tensor blob has a negative dimension in {list(shape)}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if nbytes != count * dtype.itemsize or len(blob) != off + nbytes:
        raise ValueError(f"tensor blob holds {len(blob) - off} bytes, but shape {list(shape)} "
                         f"of {dtype} needs {count * dtype.itemsize}")
    arr = np.frombuffer(blob, dtype=dtype.newbyteorder("<"), count=count, offset=off)
    out = arr.reshape(shape).astype(dtype)
    out.flags.writeable = False
    return out


def decode_tvm_metadata(obj: dict) -> dict[str, list[np.ndarray | None]]:
    """Type key -> entries from TVM's object-graph JSON; raises ValueError when malformed."""
    nodes = obj.get("nodes")
    blobs = obj.get("b64ndarrays", [])
    if not isinstance(nodes, list) or not isinstance(blobs, list):
        raise ValueError("`nodes` and `b64ndarrays` must be lists")

    def node(i: Any) -> dict:
        try:
            n = nodes[int(i)]
        except (ValueError, TypeError, IndexError):
            raise ValueError(f"node reference {i!r} is out of range") from None
        if not isinstance(n, dict):
            raise ValueError(f"node {i} is not an object")
        return n

    root = node(obj.get("root"))
    if root.get("type_key") != "Map":
        raise ValueError("the root node must be a Map from type keys to arrays")
    data = root.get("data", [])
    if "keys" in root:
        pairs = list(zip(root["keys"], data))
    else:  # NOTE: newer TVM: data = [key node, value node, ...] with String key nodes
        pairs = [(node(k).get("repr_str"), v) for k, v in zip(data[::2], data[1::2])]
    out: dict[str, list[np.ndarray | None]] = {}
    for key, arr_idx in pairs:
        if not isinstance(key, str):
            raise ValueError("metadata map keys must be strings")
        arr = node(arr_idx)
        if arr.get("type_key") != "Array":
            raise ValueError(f"metadata entry `{key}` is not an Array")
        entries: list[np.ndarray | None] = []
        for item in arr.get("data", []):
            n = node(item)
            if n.get("type_key") == "VirtualDevice":
                entries.append(_virtual_device(n, node))
                continue
            if n.get("type_key") != "relay.Constant":
                entries.append(None)
                continue
            ref = n.get("attrs", {}).get("data")
            try:
                blob = base64.b64decode(blobs[int(ref)], validate=True)
            except (TypeError, ValueError, IndexError, binascii.Error):
                raise ValueError(f"relay.Constant node {item} has no valid tensor data") from None
            entries.append(decode_dltensor(blob))
        out[key] = entries
    return out


def _virtual_device(n: dict, node: Any) -> dict[str, Any]:
    """The fields of a ``VirtualDevice`` node (its target is not kept)."""
    attrs = n.get("attrs", {})
    if not isinstance(attrs, dict):
        raise ValueError("a VirtualDevice node needs an `attrs` object")
    out: dict[str, Any] = {}
    for key in ("device_type_int", "virtual_device_id"):
        try:
            out[key] = int(attrs.get(key, -1))
        except (TypeError, ValueError):
            raise ValueError(f"VirtualDevice field `{key}` is not an integer") from None
    scope = attrs.get("memory_scope", "")
    if isinstance(scope, str) and scope.isdigit():
        scope = node(scope).get("repr_str", "")  # a reference to a String node
    out["memory_scope"] = scope if isinstance(scope, str) else ""
    return out
