"""What travels between the requester and a worker: one frame per message.

A frame is ``PTD1``, a 4-byte header length, a JSON header, then the raw bytes of each array in
the order the header lists them. Scalars, strings and short lists go in the header; arrays
(masked sums, ciphertexts, posteriors) go as raw little-endian buffers. Nothing is pickled: a
party must never be able to run code on another by what it sends. Decoding checks every length,
dtype and shape, and anything off raises :class:`~privtd.errors.ProtocolError`.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

from ..errors import ProtocolError

MAGIC = b"PTD1"
#: The dtypes a message may carry; anything else is refused on decode.
DTYPES = ("uint8", "int64", "uint64", "float64")
#: A frame larger than this is refused before it is read (1 GiB).
MAX_FRAME = 1 << 30

Message = dict[str, Any]


def encode(message: Message) -> bytes:
    """One frame from a dict of JSON-able values and numpy arrays."""
    fields: dict[str, Any] = {}
    arrays: list[list[Any]] = []
    buffers: list[bytes] = []
    for name, value in message.items():
        if isinstance(value, np.ndarray):
            dtype = value.dtype.newbyteorder("<")
            if dtype.name not in DTYPES:
                raise ProtocolError(
                    f"Message field {name!r} has dtype {value.dtype}; use one of {DTYPES}."
                )
            arrays.append([name, dtype.name, list(value.shape)])
            buffers.append(np.ascontiguousarray(value, dtype=dtype).tobytes())
        elif isinstance(value, bytes):
            arrays.append([name, "bytes", [len(value)]])
            buffers.append(value)
        else:
            fields[name] = value
    header = json.dumps({"fields": fields, "arrays": arrays}, separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<I", len(header)), header, *buffers])


def decode(frame: bytes) -> Message:
    """The message in ``frame``; a malformed frame raises ProtocolError."""
    if len(frame) < 8 or frame[:4] != MAGIC:
        raise ProtocolError("Malformed message: it does not start with a privtd frame header.")
    (header_len,) = struct.unpack("<I", frame[4:8])
    if 8 + header_len > len(frame):
        raise ProtocolError("Malformed message: the header is longer than the frame.")
    try:
        header = json.loads(frame[8 : 8 + header_len])
        fields = dict(header["fields"])
        arrays = list(header["arrays"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ProtocolError(f"Malformed message header: {exc}.") from None
    message: Message = fields
    offset = 8 + header_len
    for entry in arrays:
        try:
            name, dtype, shape = entry
            shape = tuple(int(n) for n in shape)
        except (ValueError, TypeError):
            raise ProtocolError(f"Malformed array entry {entry!r} in a message header.") from None
        if dtype == "bytes":
            size = shape[0]
        elif dtype in DTYPES and all(n >= 0 for n in shape):
            size = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        else:
            raise ProtocolError(f"Array {name!r} has dtype {dtype!r} or shape {shape}, refused.")
        if offset + size > len(frame):
            raise ProtocolError(f"Malformed message: array {name!r} runs past the frame's end.")
        raw = frame[offset : offset + size]
        offset += size
        if dtype == "bytes":
            message[name] = bytes(raw)
        else:
            message[name] = np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<")).reshape(
                shape
            )
    if offset != len(frame):
        raise ProtocolError(
            f"Malformed message: {len(frame) - offset} stray bytes after the arrays."
        )
    return message


def field(message: Message, name: str, kind: type | tuple[type, ...]) -> Any:
    """``message[name]``, which must exist and be of ``kind``, or a ProtocolError naming it."""
    if name not in message:
        raise ProtocolError(f"Message {message.get('type', '?')!r} lacks the field {name!r}.")
    value = message[name]
    if not isinstance(value, kind) or (isinstance(value, bool) and bool not in _as_tuple(kind)):
        raise ProtocolError(
            f"Field {name!r} of message {message.get('type', '?')!r} has type "
            f"{type(value).__name__}; expected {kind}."
        )
    return value


def array(message: Message, name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    """``message[name]`` as an array of exactly this dtype and shape, or a ProtocolError."""
    value = field(message, name, np.ndarray)
    if value.dtype.name != dtype or value.shape != shape:
        raise ProtocolError(
            f"Field {name!r} of message {message.get('type', '?')!r} is {value.dtype.name} "
            f"{value.shape}; expected {dtype} {shape}."
        )
    return value


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)
