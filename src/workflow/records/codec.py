"""How inputs, step results and job results become bytes, and back, typed.

Inputs are canonical JSON (pydantic's, with keys sorted), so one input always
hashes the same and a record stays readable in ``stepstone show``. Results
are MessagePack: msgpack-native values as they are, anything else (pydantic
models, dataclasses, datetimes) through the pydantic TypeAdapter of the
function's return annotation, which also brings the type back on replay.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import math
import typing
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import msgpack
from pydantic import BaseModel, TypeAdapter

from stepstone.records.large_values import Stored, Unpacked, pack_body, unpacked_bytes, value_body
from stepstone.records.piecewise import EncodedValue, native_bound
from stepstone.store.parts import Body, as_bytes


def sha256_hex(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def canonical_input(model: BaseModel) -> bytes:
    """The model as JSON with sorted keys: the same input, the same bytes.

    A NaN or infinite float anywhere in it raises ValueError: JSON has no
    such number, and pydantic writes each as ``null`` (so NaN, inf and None
    would hash alike, and the worker would find the input malformed), or,
    if the model asks, as a constant no JSON parser is bound to read.
    """
    raw = model.model_dump_json()
    if "null" in raw:  # perhaps a non-finite float that pydantic wrote as null
        _refuse_non_finite(model.model_dump(mode="json"), "")
    value = _JSON_READER.decode(raw)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _refuse_non_finite(value: object, path: str) -> None:
    """Raise ValueError naming the first NaN or infinite float in ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        _non_finite_constant(repr(value), path)
    elif isinstance(value, dict):
        for k, v in value.items():
            _refuse_non_finite(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _refuse_non_finite(v, f"{path}[{i}]")


def _non_finite_constant(constant: str, path: str = "") -> None:
    where = f" at {path}" if path else ""
    raise ValueError(
        f"{constant}{where}: only finite floats can be stored (JSON has no NaN or infinity)"
    )


_JSON_READER = json.JSONDecoder(parse_constant=_non_finite_constant)
"""What ``json.loads(raw, parse_constant=...)`` builds on every call, built once."""


def pack(value: object) -> bytes:
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def unpack(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def unpack_stored(data: Stored) -> Any:
    """The MessagePack value ``data`` holds: its encoding decoded, or the
    value a large one was decoded to as it was read."""
    return data.value if isinstance(data, Unpacked) else unpack(as_bytes(data))


class ResultCodec:
    """Encodes and decodes the results of one function, by its return annotation."""

    def __init__(self, annotation: Any) -> None:
        self.annotation = annotation
        self.adapter: TypeAdapter[Any] | None = (
            None if annotation in (inspect.Signature.empty, Any, object) else _adapter(annotation)
        )

    def encode(self, value: object) -> bytes:
        """Raises TypeError/ValueError with a message naming the value's type."""
        return as_bytes(self.encode_body(value))

    def encode_body(self, value: object) -> Body:
        """``encode``, but a large value comes back as Parts: a ``bytes``
        value's hold it, not a copy; any other's make its encoding as it is
        written (:mod:`stepstone.records.large_values`)."""
        bound = native_bound(value)  # (-1: not stored as it is)
        dumped = bound < 0
        if self.adapter is not None and dumped:
            # Python mode keeps bytes as bytes; JSON mode turns datetimes,
            # UUIDs and the like into strings the adapter parses back.
            plain = self.adapter.dump_python(value, mode="python")
            bound = native_bound(plain)
            if bound < 0:
                plain = self.adapter.dump_python(value, mode="json")
                bound = native_bound(plain)
            value = plain
        elif bound < 0:
            raise TypeError(
                f"a {type(value).__name__} is not a MessagePack value; annotate the "
                "function's return type so it can be stored and rebuilt"
            )
        try:
            if type(value) is bytes:
                return value_body(value)
            return pack_body(value, bound, private=dumped)  # (a dump's containers are its own)
        except (TypeError, ValueError, OverflowError) as exc:
            raise TypeError(f"cannot encode a {type(value).__name__}: {exc}") from exc

    def decode(self, data: Stored) -> Any:
        """The value ``data`` holds (its encoding, or the value decoded as it
        was read), as this codec's type."""
        if isinstance(data, bytes):
            value = unpack(data)
        elif isinstance(data, Unpacked):
            value = data.value
        elif (value := unpacked_bytes(data)) is None:
            whole = data.buffers
            if len(whole) == 1 and isinstance(whole[0], EncodedValue):
                value = whole[0].decoded()  # (what its encoding decodes to)
            else:
                piece = whole[0] if len(whole) == 1 else None
                value = unpack(piece if isinstance(piece, bytes | memoryview) else data.join())
        if self.adapter is not None:
            return self.adapter.validate_python(value)
        return value

    def reads_back_as_itself(self, value: object) -> bool:
        """Whether decoding ``value``'s encoding gives back an equal value of
        its very type (a ``bytes`` or ``str`` result, a number), so that a call
        may give its caller the value itself, as a replay would give the
        decoded one, and a large one is not decoded into a second copy. Else
        the caller gets the decoded value (a tuple comes back a list, a
        model is rebuilt)."""
        kind = type(value)
        return kind in _EXACT and self.annotation in (kind, inspect.Signature.empty, Any, object)


_EXACT = (type(None), bool, int, float, str, bytes)
"""Types whose values decode as equal values of the very same type."""


@lru_cache(maxsize=1024)
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


_codecs: dict[object, ResultCodec] = {}


def codec_for(fn: Callable[..., object]) -> ResultCodec:
    """The codec for ``fn``'s results, from its return annotation (cached)."""
    key = getattr(fn, "__func__", fn)
    try:
        return _codecs[key]
    except (KeyError, TypeError):
        pass
    codec = ResultCodec(return_annotation(fn))
    with contextlib.suppress(TypeError):  # an unhashable callable is not cached
        _codecs[key] = codec
    return codec


_type_codecs: dict[object, ResultCodec] = {}


def codec_for_type(annotation: Any) -> ResultCodec:
    """The codec for values of ``annotation`` (cached: building one costs a
    TypeAdapter lookup, and a job's result is encoded and decoded per run)."""
    try:
        return _type_codecs[annotation]
    except (KeyError, TypeError):
        pass
    codec = ResultCodec(annotation)
    with contextlib.suppress(TypeError):  # an unhashable annotation is not cached
        _type_codecs[annotation] = codec
    return codec


def return_annotation(fn: Callable[..., object]) -> Any:
    target = fn
    while hasattr(target, "func") and not inspect.isfunction(target):  # functools.partial
        target = target.func
    try:
        hints = typing.get_type_hints(target)
    except Exception:
        hints = {}
    if "return" in hints:
        ret = hints["return"]
        origin = typing.get_origin(ret)
        if origin is not None and origin in (typing.Awaitable, typing.Coroutine):
            ret = typing.get_args(ret)[-1]
        return ret
    return inspect.Signature.empty
