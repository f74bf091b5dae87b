"""A large value's encoding made a piece at a time (stepstone.records.piecewise)
is MessagePack's own, byte for byte, in pieces of bounded size; a record
holding it is the record packed whole; and what it decodes to is known
without decoding it. A large value in a record is decoded as its bytes are
read, and a fault in it is the record's, not the store's.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from pydantic import BaseModel

from stepstone.records.calls import Call, PositionedMemo, memo_value
from stepstone.records.codec import ResultCodec, pack
from stepstone.records.large_values import SEPARATE, LargeField, Unpacked, bin_header, rejoined
from stepstone.records.piecewise import PIECE, EncodedValue, as_decoded, fits, pieces
from stepstone.store import MemoryStore
from stepstone.store.parts import Parts, SplitObject

MiB = 1 << 20


class Row(BaseModel):
    id: int
    name: str
    score: float | None
    tags: list[str]


class Report(BaseModel):
    title: str
    body: str
    rows: list[Row]
    blob: bytes


def report(size: int) -> Report:
    return Report(
        title="naïve café ✓",
        body="héllo wörld 𝄞 " * (size // 16),
        rows=[
            Row(id=i, name=f"row {i}", score=i / 3 if i % 2 else None, tags=["a", "ß"])
            for i in range(size // 64)
        ],
        blob=bytes(range(256)) * (size // 256),
    )


VALUES: dict[str, Any] = {
    "ascii text": {"text": "0123456789abcdef" * (3 * MiB // 16)},
    "non-ascii text": {"text": "héllo wörld ✓ 𝄞" * (MiB // 8)},
    "rows": {"rows": [f"{i:0100d}" for i in range(3 * MiB // 102)]},
    "nested": [
        b"\0" * (2 * MiB),
        "x" * (2 * MiB),
        {"k": "y" * (3 * MiB), "j": list(range(300_000))},
    ],
    "many keys": {i: "v" * (i % 700) for i in range(9000)},
    "tuples": (1, (2.5, None, True), [("x" * 400,) * 5000] * 3),
    "edges": [2**64 - 1, -(2**63), 0.1, "", b"", [], {}, "a" * 31, "a" * 32, "b" * 70_000],
}


@pytest.mark.parametrize("value", VALUES.values(), ids=VALUES.keys())
def test_the_pieces_are_packb_byte_for_byte_and_bounded(value: Any) -> None:
    made = list(pieces(value))
    assert b"".join(made) == msgpack.packb(value, use_bin_type=True)
    assert max(map(len, made)) <= PIECE + 8  # (a header's bytes at most past a piece)


def test_a_small_value_is_one_piece() -> None:
    assert list(pieces({"a": 1, "b": ["x", 2.5]})) == [pack({"a": 1, "b": ["x", 2.5]})]


def test_fits_is_a_bound_it_never_understates() -> None:
    for value in VALUES.values():
        size = len(msgpack.packb(value, use_bin_type=True))
        assert not fits((value,), size - 1)
    assert fits(({"a": 1, "b": "xy"},), 100)
    assert not fits((object(),), 10**9)  # (no plain type: only packing can tell)


def test_as_decoded_is_what_decoding_gives_and_shares_the_strings() -> None:
    value = VALUES["tuples"]
    assert as_decoded(value) == msgpack.unpackb(msgpack.packb(value), strict_map_key=False)
    text = VALUES["ascii text"]
    assert as_decoded(text)["text"] is text["text"]
    rows = VALUES["rows"]
    assert as_decoded(rows)["rows"] is not rows["rows"]  # (the caller's own list)
    assert as_decoded(rows, reuse=True) is rows  # (a dump's list, already as it decodes)
    reused = as_decoded(value, reuse=True)
    assert reused == as_decoded(value) and isinstance(reused, list)  # (tuples made lists)


def test_a_large_model_is_encoded_as_it_is_written_into_a_record_packed_whole() -> None:
    codec = ResultCodec(Report)
    value = report(4 * MiB)
    body = codec.encode_body(value)
    assert isinstance(body, Parts) and isinstance(body.buffers[0], EncodedValue)
    dumped = value.model_dump(mode="python")
    assert body.join() == pack(dumped)
    record = PositionedMemo(3, Call("step", "make"), body).encode()
    assert isinstance(record, Parts)
    whole = {"pos": 3, "call": "step", "name": "make", "br": [], "value": pack(dumped)}
    assert record.join() == pack(whole)  # what readers of either form read
    assert max(len(chunk) for chunk in record.chunks()) <= PIECE + 8
    assert codec.decode(body) == value


def test_a_small_model_is_packed_whole() -> None:
    codec = ResultCodec(Row)
    row = Row(id=1, name="x", score=None, tags=[])
    assert codec.encode_body(row) == pack(row.model_dump(mode="python"))


async def test_a_large_value_is_decoded_as_it_is_read_in_bounded_pieces() -> None:
    store = MemoryStore()
    codec = ResultCodec(Report)
    value = report(4 * MiB)
    record = PositionedMemo(1, Call("step", "make"), codec.encode_body(value)).encode()
    await store.put("memo", record.join())
    field = memo_value()
    fed: list[int] = []

    def splitter(look: bytes) -> Any:
        split = field(look)
        sink = field.unpacking
        assert split is not None and sink is not None  # (a model: decoded as read)

        def counted(view: memoryview) -> None:
            fed.append(len(view))
            sink(view)

        return type(split)(split.start, split.length, into=counted)

    memo = PositionedMemo.read_split(await store.get_split("memo", splitter), field)
    assert isinstance(memo.value, Unpacked)
    assert codec.decode(memo.value) == value
    assert max(fed) <= MiB and sum(fed) == len(memo.value)


def test_a_large_value_that_does_not_decode_is_the_records_fault() -> None:
    garbage = b"\xc1" * SEPARATE  # (0xc1: no MessagePack type)
    record = msgpack.packb({"v": 1, "result": garbage}, use_bin_type=True)
    field = LargeField("result")
    split = field(record[:65536])
    assert split is not None and split.into is not None
    split.into(memoryview(record)[split.start : split.start + split.length])
    found = SplitObject("k", record[: split.start], b"", record[split.start + split.length :], "e")
    with pytest.raises(ValueError, match="does not decode"):
        rejoined(found, field)


def test_a_large_value_shorter_than_its_field_is_refused() -> None:
    value = pack({"text": "z" * SEPARATE})
    record = b"\x81\xa6result" + bin_header(len(value) + 3) + value + b"\xc0\xc0\xc0"
    field = LargeField("result")
    split = field(record[:65536])
    assert split is not None and split.into is not None
    split.into(memoryview(record)[split.start :])
    found = SplitObject("k", record[: split.start], b"", b"", "e")
    with pytest.raises(ValueError):
        rejoined(found, field)
