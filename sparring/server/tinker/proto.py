"""The protobuf bodies of the Tinker wire protocol, read and written by hand.

Newer `tinker` SDKs send `forward_backward` as a protobuf `ForwardBackwardRequest`
(`Content-Type: application/x-protobuf`, optionally zstd-compressed) and ask
for `ForwardBackwardOutput` and `SampleResponse` results as protobuf
(`Accept: application/x-protobuf`). Only those three messages (and the ones
inside them) are needed, so instead of a generated module and a `protobuf`
dependency this file speaks the wire format directly: `_fields` splits a
message into (field number, value) pairs, the `decode_*` functions turn a
request into the same dict shape as its JSON form (so one validator serves
both encodings), and the `encode_*` functions write results. Field numbers
follow `tinker_public.proto` (package `tinker_public`) of the SDK.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np

from ...types import ForwardBackwardOutput, SampleResponse

PROTOBUF_MEDIA_TYPE = "application/x-protobuf"

# tinker_public.DType
_DTYPE_FLOAT32, _DTYPE_INT64, _DTYPE_INT32, _DTYPE_BFLOAT16 = 1, 2, 3, 4
_WIRE_DTYPE = {"float32": _DTYPE_FLOAT32, "int64": _DTYPE_INT64}
# tinker_public.StopReason
_STOP_REASON = {"stop": 0, "length": 1}

_VARINT, _FIXED64, _LENGTH, _FIXED32 = 0, 1, 2, 5


class ProtoError(ValueError):
    """A protobuf body that is truncated, malformed, or uses a feature sparring does not serve."""


# Reading -------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ProtoError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varint/fixed fields, bytes for length-delimited ones."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire_type = key >> 3, key & 7
        if wire_type == _VARINT:
            value, pos = _varint(buf, pos)
        elif wire_type == _LENGTH:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ProtoError(f"field {number} is truncated")
            value, pos = bytes(buf[pos : pos + length]), pos + length
        elif wire_type == _FIXED64:
            value, pos = int.from_bytes(buf[pos : pos + 8], "little"), pos + 8
        elif wire_type == _FIXED32:
            value, pos = int.from_bytes(buf[pos : pos + 4], "little"), pos + 4
        else:
            raise ProtoError(f"unsupported protobuf wire type {wire_type} (field {number})")
        if pos > len(buf):
            raise ProtoError(f"field {number} is truncated")
        yield number, value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _double(value: int) -> float:
    return struct.unpack("<d", value.to_bytes(8, "little"))[0]


def _text(value: int | bytes, what: str) -> str:
    if not isinstance(value, bytes):
        raise ProtoError(f"{what} must be a string")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ProtoError(f"{what} is not valid UTF-8") from error


def _message(value: int | bytes, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise ProtoError(f"{what} must be a message")
    return value


def _packed_ints(values: list[int | bytes]) -> list[int]:
    """A repeated int64 field, packed (one bytes value) or not (one int per element)."""
    out: list[int] = []
    for value in values:
        if isinstance(value, int):
            out.append(_signed(value))
            continue
        pos = 0
        while pos < len(value):
            item, pos = _varint(value, pos)
            out.append(_signed(item))
    return out


def _array(data: bytes, dtype: int, what: str) -> np.ndarray:
    kinds = {_DTYPE_FLOAT32: np.float32, _DTYPE_INT64: np.int64, _DTYPE_INT32: np.int32, _DTYPE_BFLOAT16: np.uint16}
    if dtype not in kinds:
        raise ProtoError(f"{what}: unsupported tensor dtype {dtype}")
    if len(data) % np.dtype(kinds[dtype]).itemsize:
        raise ProtoError(f"{what}: {len(data)} bytes is not a whole number of elements")
    array = np.frombuffer(data, dtype=kinds[dtype])
    if dtype == _DTYPE_BFLOAT16:
        array = (array.astype(np.uint32) << 16).view(np.float32)
    return array


def _tensor(buf: bytes, what: str) -> dict:
    """A `Tensor` message as the JSON `WireTensorData` shape {data, dtype, shape} (sparse CSR made dense)."""
    dense = sparse = None
    dtype, shape_values = 0, []
    for number, value in _fields(buf):
        if number == 1:
            dense = _message(value, what)
        elif number == 2:
            sparse = _message(value, what)
        elif number == 3:
            dtype = value
        elif number == 4:
            shape_values.append(value)
    shape = _packed_ints(shape_values) or None
    if sparse is not None:
        parts = {number: value for number, value in _fields(sparse)}
        values = _array(parts.get(1, b""), dtype, what)
        crow = _array(parts.get(2, b""), _DTYPE_INT64, what)
        col = _array(parts.get(3, b""), _DTYPE_INT64, what)
        if not shape or len(shape) != 2 or len(crow) != shape[0] + 1 or len(col) != len(values):
            raise ProtoError(
                f"{what}: sparse CSR tensor needs a 2-D shape, shape[0] + 1 row pointers and one column per value"
            )
        array = np.zeros(shape, dtype=values.dtype)
        rows = np.repeat(np.arange(shape[0]), np.diff(crow))
        array[rows, col] = values
    else:
        array = _array(dense or b"", dtype, what)
    wire_dtype = "float32" if array.dtype.kind == "f" else "int64"
    return {"data": array.reshape(-1).tolist(), "dtype": wire_dtype, "shape": shape}


def _chunk(buf: bytes, what: str) -> dict:
    for number, value in _fields(buf):
        if number == 1:
            tokens = {n: v for n, v in _fields(_message(value, what))}.get(1, b"")
            return {"type": "encoded_text", "tokens": _array(_message(tokens, what), _DTYPE_INT32, what).tolist()}
        if number in (2, 3):
            return {"type": "image" if number == 2 else "dmel"}
    raise ProtoError(f"{what}: empty chunk")


def _map_entry(buf: bytes, what: str) -> tuple[str, int | bytes | None]:
    key, value = "", None
    for number, item in _fields(buf):
        if number == 1:
            key = _text(item, f"{what} key")
        elif number == 2:
            value = item
    return key, value


def _datum(buf: bytes, index: int) -> dict:
    what = f"data[{index}]"
    chunks, inputs = [], {}
    for number, value in _fields(buf):
        if number == 1:
            chunks.append(_chunk(_message(value, what), f"{what}.model_input"))
        elif number == 2:
            key, tensor = _map_entry(_message(value, what), f"{what}.loss_fn_inputs")
            inputs[key] = _tensor(_message(tensor or b"", what), f"{what}.loss_fn_inputs[{key!r}]")
    return {"model_input": {"chunks": chunks}, "loss_fn_inputs": inputs}


def decode_forward_backward_request(buf: bytes) -> dict:
    """A `ForwardBackwardRequest` as its JSON shape, plus `forward_only`."""
    request: dict = {"model_id": None, "seq_id": None, "forward_only": False}
    data, loss_fn, config, config_v2 = [], "", {}, {}
    for number, value in _fields(buf):
        if number == 1:
            request["model_id"] = _text(value, "model_id")
        elif number == 2:
            request["seq_id"] = _signed(value) if isinstance(value, int) else None
        elif number == 3:
            data.append(_datum(_message(value, "data"), len(data)))
        elif number == 4:
            loss_fn = _text(value, "loss_fn")
        elif number == 5:
            key, item = _map_entry(_message(value, "loss_fn_config"), "loss_fn_config")
            config[key] = _double(item) if isinstance(item, int) else 0.0
        elif number == 6:
            request["forward_only"] = bool(value)
        elif number == 7:
            key, item = _map_entry(_message(value, "loss_fn_config_v2"), "loss_fn_config_v2")
            for kind, part in _fields(_message(item or b"", "loss_fn_config_v2")):
                config_v2[key] = (
                    _double(part) if kind == 1 and isinstance(part, int) else _text(part, f"loss_fn_config_v2[{key!r}]")
                )
    request["forward_backward_input"] = {
        "data": data,
        "loss_fn": loss_fn,
        "loss_fn_config": {**config, **config_v2} or None,
    }
    return request


# Writing -------------------------------------------------------------------


def _put_varint(out: bytearray, value: int) -> None:
    value &= (1 << 64) - 1
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put(out: bytearray, number: int, value: bytes | int | float | str) -> None:
    if isinstance(value, float):
        _put_varint(out, number << 3 | _FIXED64)
        out += struct.pack("<d", value)
    elif isinstance(value, int):
        _put_varint(out, number << 3 | _VARINT)
        _put_varint(out, value)
    else:
        payload = value.encode("utf-8") if isinstance(value, str) else value
        _put_varint(out, number << 3 | _LENGTH)
        _put_varint(out, len(payload))
        out += payload


def _put_map_entry(out: bytearray, number: int, key: str, value: bytes | float) -> None:
    entry = bytearray()
    _put(entry, 1, key)
    _put(entry, 2, value)
    _put(out, number, bytes(entry))


def encode_forward_backward_output(output: ForwardBackwardOutput) -> bytes:
    """One `ArrayRecord` holding every datum's outputs (each field a `BatchedTensor`)."""
    record = bytearray()
    _put(record, 1, output.loss_fn_output_type)
    names = list(output.loss_fn_outputs[0]) if output.loss_fn_outputs else []
    for name in names:
        arrays = [datum[name].to_numpy() for datum in output.loss_fn_outputs]
        wire = "float32" if arrays[0].dtype.kind == "f" else "int64"
        flat = [
            np.ascontiguousarray(a, dtype=np.float32 if wire == "float32" else np.int64).reshape(-1) for a in arrays
        ]
        offsets = np.cumsum([0, *(a.nbytes for a in flat)], dtype=np.int64)
        tensor = bytearray()
        _put(tensor, 1, b"".join(a.tobytes() for a in flat))
        _put(tensor, 2, offsets.tobytes())
        _put(tensor, 3, _WIRE_DTYPE[wire])
        _put_map_entry(record, 2, name, bytes(tensor))
    _put(record, 3, len(output.loss_fn_outputs))
    out = bytearray()
    _put(out, 1, output.loss_fn_output_type)
    _put(out, 2, bytes(record))
    for key, value in output.metrics.items():
        _put_map_entry(out, 3, key, float(value))
    return bytes(out)


def encode_sample_response(response: SampleResponse) -> bytes:
    out = bytearray()
    for sequence in response.sequences:
        item = bytearray()
        if _STOP_REASON[sequence.stop_reason]:
            _put(item, 1, _STOP_REASON[sequence.stop_reason])
        _put(item, 2, np.asarray(sequence.tokens, dtype=np.int32).tobytes())
        if sequence.logprobs is not None:
            _put(item, 3, np.asarray(sequence.logprobs, dtype=np.float32).tobytes())
        _put(out, 1, bytes(item))
    if response.prompt_logprobs is not None:
        values = [np.nan if value is None else value for value in response.prompt_logprobs]
        _put(out, 2, np.asarray(values, dtype=np.float32).tobytes())
    return bytes(out)
