"""Sealed payloads, below the runner: a payload sealed by any chain of codecs
opens to its bytes (in one piece, or fed a piece at a time as a store reads
it); a plain payload passes through; what does not open says why and which
key; a large value is sealed as it is written and opened as it is read,
never whole twice; the configuration names codecs and takes keys only from
the environment."""

from __future__ import annotations

import base64
import os
import tracemalloc
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stepstone import AesGcmCodec, PayloadUnreadable, ZlibCodec, ZstdCodec, codecs_from_env
from stepstone.records.calls import Call, PositionedMemo, memo_value
from stepstone.records.codec import codec_for_type
from stepstone.records.large_values import Unpacked, write
from stepstone.records.payloads import CHUNK, Opening, Payloads, sealed, sealed_by
from stepstone.store.file import FileStore
from stepstone.store.parts import Parts, feed

K1 = base64.b64encode(b"\x01" * 32).decode()
K2 = base64.b64encode(b"\x02" * 32).decode()

CHAINS = {
    "zstd": lambda: [ZstdCodec()],
    "zlib": lambda: [ZlibCodec()],
    "aes": lambda: [AesGcmCodec({"k1": K1})],
    "zstd+aes": lambda: [ZstdCodec(), AesGcmCodec({"k1": K1})],
}


@settings(max_examples=60, deadline=None)
@given(
    data=st.one_of(st.binary(max_size=4096), st.text(max_size=2000).map(str.encode)),
    chain=st.sampled_from(sorted(CHAINS)),
    feed_size=st.integers(min_value=1, max_value=97),
)
def test_any_payload_opens_to_its_bytes_whole_or_fed_in_pieces(
    data: bytes, chain: str, feed_size: int
) -> None:
    payloads = Payloads(CHAINS[chain]())
    frame = payloads.seal_bytes(data)
    assert sealed(frame)
    assert payloads.open_bytes(frame) == data
    opening = Opening(len(frame), payloads)
    for at in range(0, len(frame), feed_size):
        opening(memoryview(frame[at : at + feed_size]))
    assert opening.plain() == data


def test_a_plain_payload_passes_through_and_no_codec_seals_nothing() -> None:
    plain = msgpack.packb({"a": 1})
    assert Payloads([AesGcmCodec({"k1": K1})]).open_bytes(plain) == plain
    assert Payloads().seal_bytes(plain) == plain
    assert not sealed(b'{"json": true}') and not sealed(plain)


def test_what_sealed_a_payload_is_said_without_opening_it() -> None:
    frame = Payloads([ZstdCodec(), AesGcmCodec([("k2", K2), ("k1", K1)])]).seal_bytes(b"x" * 100)
    assert sealed_by(frame) == "encrypted (key k2), compressed (zstd)"
    with pytest.raises(PayloadUnreadable) as raised:
        Payloads().open_bytes(frame)
    assert raised.value.missing and raised.value.key_id == "k2"
    assert raised.value.shown() == "<encrypted (key k2), compressed (zstd)>"


def test_every_key_of_the_list_decrypts_and_the_first_encrypts() -> None:
    under_k1 = Payloads([AesGcmCodec({"k1": K1})]).seal_bytes(b"old")
    rotated = Payloads([AesGcmCodec([("k2", K2), ("k1", K1)])])
    assert rotated.open_bytes(under_k1) == b"old"
    assert sealed_by(rotated.seal_bytes(b"new")) == "encrypted (key k2)"
    with pytest.raises(PayloadUnreadable, match="key 'k1' is not held"):
        Payloads([AesGcmCodec({"k2": K2})]).open_bytes(under_k1)


@pytest.mark.parametrize("where", [-1, -20, 40])
def test_an_altered_payload_does_not_open(where: int) -> None:
    payloads = Payloads([ZstdCodec(), AesGcmCodec({"k1": K1})])
    frame = bytearray(payloads.seal_bytes(b"the secret" * 100))
    frame[where] ^= 0x40
    with pytest.raises(PayloadUnreadable) as raised:
        payloads.open_bytes(bytes(frame))
    assert not raised.value.missing


def test_a_key_given_under_another_id_does_not_pass_for_it() -> None:
    """The key id is bound to each chunk: renaming it in the header fails."""
    frame = Payloads([AesGcmCodec({"k1": K1})]).seal_bytes(b"secret")
    renamed = frame.replace(b"k1", b"k2", 1)
    with pytest.raises(PayloadUnreadable):
        Payloads([AesGcmCodec({"k2": K1})]).open_bytes(renamed)


def test_cut_short_or_extended_payloads_do_not_open() -> None:
    payloads = Payloads([ZlibCodec()])
    frame = payloads.seal_bytes(b"abc" * 1000)
    for broken in (frame[:-1], frame + b"\x00", frame[:3]):
        with pytest.raises(PayloadUnreadable):
            payloads.open_bytes(broken)


def test_chunks_reordered_or_cut_off_do_not_open() -> None:
    """Each chunk is sealed with its number and whether it is the last."""
    payloads = Payloads([AesGcmCodec({"k1": K1})])
    frame = payloads.seal_bytes(os.urandom(3 * CHUNK))
    head_end = len(frame) - 3 * (4 + 12 + 5 + CHUNK + 16)
    head, body = frame[:head_end], frame[head_end:]
    one = 4 + 12 + 5 + CHUNK + 16
    chunks = [body[at : at + one] for at in range(0, len(body), one)]
    assert len(chunks) == 3 and payloads.open_bytes(head + b"".join(chunks))
    for broken in (chunks[1] + chunks[0] + chunks[2], chunks[0] + chunks[1]):
        with pytest.raises(PayloadUnreadable):
            payloads.open_bytes(head + broken)


def test_bad_keys_are_refused_naming_what_is_wrong_and_never_the_key() -> None:
    with pytest.raises(ValueError, match="32"):
        AesGcmCodec({"k1": b"short"})
    with pytest.raises(ValueError, match="key id"):
        AesGcmCodec({"k 1": K1})
    with pytest.raises(ValueError, match="not base64"):
        AesGcmCodec({"k1": "not base64!"})
    with pytest.raises(ValueError, match="at least one key"):
        AesGcmCodec({})


def test_configuration_names_codecs_and_keys_come_from_the_environment(tmp_path: Path) -> None:
    codecs = codecs_from_env(
        environ={"STEPSTONE_CODEC": "zstd,aes-gcm", "STEPSTONE_KEYS": f"k2={K2},k1={K1}"}
    )
    assert [c.name for c in codecs] == ["zstd", "aes-gcm"]
    assert codecs[1].key_id == "k2"
    keys = tmp_path / "keys"
    keys.write_text(f"# rotated in March\nk3={K2}\nk2={K1}\n")
    (aes,) = codecs_from_env("aes-gcm", {"STEPSTONE_KEYS_FILE": str(keys)})
    assert aes.key_id == "k3"
    assert codecs_from_env(environ={}) == []
    with pytest.raises(ValueError, match="STEPSTONE_KEYS"):
        codecs_from_env("aes-gcm", {})
    with pytest.raises(ValueError, match="no payload codec 'rot13'"):
        codecs_from_env("rot13", {})
    with pytest.raises(ValueError) as raised:
        codecs_from_env("aes-gcm", {"STEPSTONE_KEYS": K1})  # (an id forgotten)
    assert K1 not in str(raised.value)


async def test_a_large_value_is_sealed_and_opened_as_it_streams_never_whole_twice(
    tmp_path: Path,
) -> None:
    """A 48 MiB result, sealed, written to a directory store and read back:
    at no time are two copies of it in memory (tracemalloc's peak, over the
    value itself, stays under half its size: a chunk or a few at a time)."""
    payloads = Payloads([ZstdCodec(), AesGcmCodec({"k1": K1})])
    store = FileStore(tmp_path)
    size = 48 * CHUNK
    value = os.urandom(size)  # (does not compress: the sealed value is as large)
    codec = codec_for_type(bytes)
    tracemalloc.start()
    try:
        body = payloads.seal(codec.encode_body(value))
        assert isinstance(body, Parts)
        memo = PositionedMemo(1, Call("step", "big"), body).encode()
        await write(store, "memo", memo, if_absent=True)
        _, written = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        field = memo_value(payloads)
        read = PositionedMemo.read_split(await store.get_split("memo", field), field)
        assert isinstance(read.value, Unpacked)  # (opened and decoded as it was read)
        back = codec.decode(read.value)
        _, reading = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert back == value
    print(f"peaks: writing {written / size:.2f}x, reading {reading / size:.2f}x the value")
    assert written < size // 2, f"writing peaked at {written / size:.2f}x the value"
    assert reading < size * 1.5, f"reading peaked at {reading / size:.2f}x the value"
    assert value[:64] not in (tmp_path / "memo").read_bytes()


@pytest.mark.parametrize("reader", ["no codec", "another key"])
async def test_a_large_value_a_reader_cannot_open_is_kept_sealed_and_says_which_key(
    tmp_path: Path, reader: str
) -> None:
    """The record reads (a sweep, a listing need its other fields); opening
    the value says which key it lacks."""
    payloads = Payloads([AesGcmCodec({"k1": K1})])
    store = FileStore(tmp_path)
    value = os.urandom(3 * CHUNK)
    codec = codec_for_type(bytes)
    memo = PositionedMemo(1, Call("step", "big"), payloads.seal(codec.encode_body(value)))
    await write(store, "memo", memo.encode(), if_absent=True)
    other = Payloads() if reader == "no codec" else Payloads([AesGcmCodec({"k2": K2})])
    field = memo_value(other)
    read = PositionedMemo.read_split(await store.get_split("memo", field), field)
    assert read.call == Call("step", "big")
    assert isinstance(read.value, bytes) and sealed_by(read.value) == "encrypted (key k1)"
    with pytest.raises(PayloadUnreadable, match="k1") as raised:
        other.open(read.value)
    assert raised.value.missing
    assert codec.decode(payloads.open(read.value)) == value


def test_a_sealed_body_fed_as_a_store_reads_it_matches_the_one_read_whole() -> None:
    """And it is the same bytes each time it is made (a write that starts
    over, a checksum read before the send): encryption included."""
    payloads = Payloads([ZlibCodec(), AesGcmCodec({"k1": K1})])
    data = b"".join(str(n).encode() for n in range(600_000))
    body = payloads.seal(Parts([data[:100], data[100:]]))
    assert isinstance(body, Parts)
    joined = body.join()
    assert joined == body.join()  # (made again, alike)
    again = payloads.seal(Parts([data[:100], data[100:]]))
    assert isinstance(again, Parts) and again.join() != joined  # (another payload, another IV)
    opening = Opening(len(joined), payloads)
    feed(opening, joined)
    assert opening.plain() == data == payloads.open_bytes(joined)
