"""ReadLine: the order a StoreQueue reads records it has only seen listed."""

from __future__ import annotations

import random

import pytest

from runtime.read_line import Entry, ReadLine


def listed(ids: str, modified: float) -> list[tuple[str, str | None, float]]:
    return [(job_id, None, modified) for job_id in ids]


def ids(entries: list[Entry]) -> str:
    return "".join(job_id for job_id, _, _ in entries)


def is_rotation(part: str, whole: str) -> bool:
    return len(part) == len(whole) and part in whole + whole


def test_chunks_are_read_oldest_first_each_from_its_own_point() -> None:
    line = ReadLine(3, random.Random(7))
    # key order, as a listing gives it, the newer records mixed in among old
    line.reset(
        [
            ("a", None, 100.2),
            ("b", None, 107.0),
            ("c", None, 100.4),
            ("d", None, 100.1),
            ("e", "etag-e", 107.3),
            ("f", None, 107.1),
        ]
    )
    assert len(line) == 6
    old, new = ids(line.take(3)), ids(line.take(10))
    assert is_rotation(old, "acd")  # the oldest three, in key order from some point
    assert is_rotation(new, "bef")
    assert len(line) == 0 and line.take(1) == []


def test_records_listed_as_held_come_after_all_the_waiting_ones() -> None:
    line = ReadLine(10, random.Random(2))
    line.reset(listed("xy", 500.0), others=listed("ab", 1.0))
    first = line.take(2)
    assert sorted(ids(first)) == ["x", "y"] and all(free for _, _, free in first)
    rest = line.take(2)
    assert sorted(ids(rest)) == ["a", "b"] and not any(free for _, _, free in rest)


def test_the_etag_the_view_held_comes_back_with_the_id() -> None:
    line = ReadLine(10)
    line.reset([("a", "etag-a", 1.0)])
    assert line.take(1) == [("a", "etag-a", True)]


def test_processes_start_at_different_points_of_the_same_order() -> None:
    entries = listed("abcdefghijklmnopqrstuvwxyz", 5.0)
    starts = set()
    for seed in range(20):
        line = ReadLine(100, random.Random(seed))
        line.reset(entries)
        first = ids(line.take(26))
        assert is_rotation(first, "abcdefghijklmnopqrstuvwxyz")
        starts.add(first[0])
    assert len(starts) > 10


def test_a_jump_moves_within_the_current_chunk_only() -> None:
    line = ReadLine(8, random.Random(3))
    line.reset(listed("abcdefgh", 10.0) + listed("XYZ", 20.0))
    taken = ids(line.take(2))
    for _ in range(5):
        line.jump()
    rest = ids(line.take(6))
    assert sorted(taken + rest) == list("abcdefgh")  # nothing lost or repeated
    assert is_rotation(ids(line.take(3)), "XYZ")


def test_take_spans_chunks() -> None:
    line = ReadLine(2, random.Random(1))
    line.reset(listed("ab", 1.0) + listed("cd", 2.0) + listed("e", 3.0))
    first = ids(line.take(3))
    assert sorted(first[:2]) == ["a", "b"] and first[2] in "cd"
    assert len(line) == 2


def test_reset_replaces_what_was_left() -> None:
    line = ReadLine(10)
    line.reset(listed("abc", 1.0))
    line.reset(listed("x", 1.0))
    assert ids(line.take(5)) == "x"


def test_a_chunk_holds_at_least_one_record() -> None:
    with pytest.raises(ValueError, match="chunk must be at least 1"):
        ReadLine(0)
