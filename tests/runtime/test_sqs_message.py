"""The SQS message codec: what goes on the wire, and what it refuses.

Messages already in a queue must read the same after an upgrade, so the
bodies below are byte for byte what earlier versions sent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stepstone.runtime.sqs.message import (
    ForeignMessage,
    JobMessage,
    MalformedMessage,
    decode,
    encode,
)

SENT = (
    '{"v":1,"id":"order-7","kind":"charge","prio":2,"max":5,"run_at":1700000000.25,'
    '"enq":1700000000.25,"a":0,"c":0,"h":{"trace":"t1"},"p":"AP9iaW5hcnk="}'
)
"""An enqueue without an id store, as SqsQueue has always sent it."""

SPILLED = (
    '{"v":1,"id":"big","kind":"","prio":5,"max":3,"run_at":10,"enq":10.5,"a":1,"c":2,'
    '"h":{},"tok":"0123456789abcdef","sp":1}'
)
"""A spilled job's message: its payload is in the id store's marker only."""

DEAD = (
    '{"v":1,"id":"j","kind":"k","prio":9,"max":5,"run_at":1.0,"enq":1.0,"a":5,"c":6,'
    '"h":{},"p":"","dead":"ValueError: nope","died":2.5,"err":"ValueError: nope"}'
)
"""Dead-lettered after its last attempt: the error was added after the death."""


def test_a_message_sent_before_reads_the_same_and_encodes_to_the_same_bytes() -> None:
    message = decode(SENT)
    assert message == JobMessage(
        id="order-7",
        kind="charge",
        priority=2,
        max_attempts=5,
        run_at=1700000000.25,
        enqueued_at=1700000000.25,
        attempts=0,
        claims=0,
        headers={"trace": "t1"},
        payload=b"\x00\xffbinary",
    )
    assert encode(message) == SENT


def test_a_spilled_message_has_no_payload_and_encodes_to_the_same_bytes() -> None:
    message = decode(SPILLED)
    assert message.spilled and message.payload is None
    assert (message.token, message.attempts, message.claims) == ("0123456789abcdef", 1, 2)
    assert encode(message) == SPILLED


def test_a_dead_message_reads_its_reason_time_and_error() -> None:
    message = decode(DEAD.encode())  # a marker is bytes
    assert (message.dead_reason, message.died_at) == ("ValueError: nope", 2.5)
    assert message.last_error == "ValueError: nope" and message.payload == b""
    assert json.loads(encode(message)) == json.loads(DEAD)


def test_a_foreign_message_is_set_aside_with_its_body_and_refused_as_a_job() -> None:
    text = encode(ForeignMessage(id="m-1", body="hello", reason="not a job", receives=3))
    assert text == '{"v":1,"id":"m-1","foreign":"hello","dead":"not a job","a":0,"c":3}'
    with pytest.raises(MalformedMessage, match="foreign message"):
        decode(text)


job_ids = st.from_regex(r"[A-Za-z0-9._-]{1,200}", fullmatch=True).filter(
    lambda s: s not in (".", "..")
)
numbers = st.one_of(st.integers(0, 2**32), st.floats(0, 4e9))
"""Times that could be real: 1970 to 2106 (stepstone.runtime.plausible)."""


@st.composite
def job_messages(draw: st.DrawFn) -> JobMessage:
    spilled = draw(st.booleans())
    optional_text = st.none() | st.text()
    return JobMessage(
        id=draw(job_ids),
        kind=draw(st.text()),
        priority=draw(st.integers(0, 9)),
        max_attempts=draw(st.integers(1, 1000)),
        run_at=draw(numbers),
        enqueued_at=draw(numbers),
        attempts=draw(st.integers(0, 10_000)),
        claims=draw(st.integers(0, 10_000)),
        headers=draw(st.dictionaries(st.text(), st.text(), max_size=5)),
        payload=draw((st.none() | st.binary()) if spilled else st.binary()),
        token=draw(st.none() | st.text(min_size=1)),
        spilled=spilled,
        last_error=draw(optional_text),
        dead_reason=draw(optional_text),
        died_at=draw(st.none() | numbers),
        lapses=draw(st.integers(0, 10_000)),
    )


@given(job_messages())
def test_every_job_message_round_trips(message: JobMessage) -> None:
    assert decode(encode(message)) == message
    assert decode(encode(message).encode()) == message


def _body(**changes: Any) -> str:
    """SENT with keys changed (a value of ... removes the key)."""
    body = json.loads(SENT)
    for key, value in changes.items():
        if value is ...:
            body.pop(key, None)
        else:
            body[key] = value
    return json.dumps(body)


MALFORMED = [
    ("", "not JSON"),
    ("{not json", "not JSON"),
    (b"\xff\xfe\xfd", "not JSON"),
    ("[1, 2]", "expected a JSON object, found an array"),
    ('"text"', "expected a JSON object, found a string"),
    ("null", "expected a JSON object, found null"),
    (_body(v=...), "field 'v' (format) is missing"),
    (_body(v=2), "unknown message format 2"),
    (_body(v=True), "unknown message format True"),
    (_body(v="1"), "unknown message format '1'"),
    (_body(id=...), "field 'id' (id) is missing"),
    (_body(id=7), "field 'id' (id) is an integer, expected a string"),
    (_body(id="a/b"), "field 'id': invalid run id 'a/b'"),
    (_body(id=".."), "field 'id': invalid run id '..'"),
    (_body(kind=...), "field 'kind' (kind) is missing"),
    (_body(kind=None), "field 'kind' (kind) is null, expected a string"),
    (_body(prio=...), "field 'prio' (priority) is missing"),
    (_body(prio="5"), "field 'prio' (priority) is a string, expected an integer"),
    (_body(prio=5.0), "field 'prio' (priority) is a fraction, expected an integer"),
    (_body(prio=True), "field 'prio' (priority) is a boolean, expected an integer"),
    (_body(prio=10), "field 'prio' (priority) is 10, expected 0 to 9"),
    (_body(prio=-1), "field 'prio' (priority) is -1, expected 0 to 9"),
    (_body(max=...), "field 'max' (max_attempts) is missing"),
    (_body(max=0), "field 'max' (max_attempts) is 0, expected 1 to 1000000"),
    (_body(max=2**63), f"field 'max' (max_attempts) is {2**63}, expected 1 to 1000000"),
    (_body(run_at=...), "field 'run_at' (run_at) is missing"),
    (_body(run_at="soon"), "field 'run_at' (run_at) is a string, expected a number"),
    (_body(run_at=float("inf")), "field 'run_at' (run_at) is inf, expected a finite number"),
    (_body(run_at=float("nan")), "field 'run_at' (run_at) is nan, expected a finite number"),
    (_body(run_at=1e20), "field 'run_at' (run_at): run_at 1e+20 is not a time"),
    (_body(run_at=-1e12), "field 'run_at' (run_at): run_at -1000000000000.0 is not a time"),
    (_body(enq=...), "field 'enq' (enqueued_at) is missing"),
    (_body(enq=1e11), "field 'enq' (enqueued_at): enqueued_at 100000000000.0 is not a time"),
    (_body(enq=False), "field 'enq' (enqueued_at) is a boolean, expected a number"),
    (_body(a=...), "field 'a' (attempts) is missing"),
    (_body(a="zz"), "field 'a' (attempts) is a string, expected an integer"),
    (_body(a=-1), "field 'a' (attempts) is -1, expected 0 to 1000000"),
    (_body(a=10**7), "field 'a' (attempts) is 10000000, expected 0 to 1000000"),
    (_body(c=...), "field 'c' (claims) is missing"),
    (_body(c=1.5), "field 'c' (claims) is a fraction, expected an integer"),
    (_body(c=-(2**63)), f"field 'c' (claims) is {-(2**63)}, expected 0 to 1000000"),
    (_body(l=True), "field 'l' (lapses) is a boolean, expected an integer"),
    (_body(l=-1), "field 'l' (lapses) is -1, expected 0 to 1000000"),
    (_body(h=...), "field 'h' (headers) is missing"),
    (_body(h=["trace"]), "field 'h' (headers) is an array, expected an object"),
    (_body(h={"trace": 1}), "field 'h' (headers) must map strings to strings"),
    (_body(p=...), "field 'p' (payload) is missing"),
    (_body(p=12), "field 'p' (payload) is an integer, expected a string"),
    (_body(p="not base64!"), "field 'p' (payload) is not base64"),
    (_body(p="AAA"), "field 'p' (payload) is not base64"),
    (_body(sp=True), "field 'sp' (spilled) is True, expected 1"),
    (_body(sp=0), "field 'sp' (spilled) is 0, expected 1"),
    (_body(tok=5), "field 'tok' (token) is an integer, expected a string"),
    (_body(err=["x"]), "field 'err' (last_error) is an array, expected a string"),
    (_body(dead=None), "field 'dead' (dead_reason) is null, expected a string"),
    (_body(died="now"), "field 'died' (died_at) is a string, expected a number"),
    (_body(died=-1e12), "field 'died' (died_at): died_at -1000000000000.0 is not a time"),
    (_body(foreign="raw"), "a foreign message set aside in the dead-letter queue"),
]


@pytest.mark.parametrize(("text", "says"), MALFORMED)
def test_a_malformed_body_is_refused_saying_what_is_wrong(text: str | bytes, says: str) -> None:
    with pytest.raises(MalformedMessage) as refused:
        decode(text)
    assert says in str(refused.value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)
near_misses = st.builds(
    lambda key, value: _body(**{key: value}),
    st.sampled_from([*json.loads(SENT), "sp", "tok", "err", "dead", "died"]),
    st.just(...) | json_values,
)
"""SENT with one key removed or set to any JSON value."""


@given(st.one_of(st.text(), st.binary(), json_values.map(json.dumps), near_misses))
def test_any_body_is_refused_with_malformed_message_or_read_whole(text: str | bytes) -> None:
    try:
        message = decode(text)
    except MalformedMessage:
        return
    assert decode(encode(message)) == message
