"""ReadLine: the order a StoreQueue reads records it has only seen listed."""

from __future__ import annotations

import random

import pytest

from stepstone.runtime.store_queue.read_line import ReadLine, ReadLineEntry


def listed(ids: str, place: float) -> list[tuple[str, str | None, float]]:
    return [(job_id, None, place) for job_id in ids]


def ids(entries: list[ReadLineEntry]) -> str:
    return "".join(job_id for job_id, _ in entries)


def is_rotation(part: str, whole: str) -> bool:
    return len(part) == len(whole) and part in whole + whole


def test_chunks_are_read_in_line_order_each_from_its_own_point() -> None:
    line = ReadLine(10, 0.5, random.Random(7))
    # key order, as a listing gives it; places within 0.5 s of the one before
    # form a chunk
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
    first, second = ids(line.take(3)), ids(line.take(10))
    assert is_rotation(first, "acd")  # the earlier places, in key order from some point
    assert is_rotation(second, "bef")
    assert len(line) == 0 and line.take(1) == []


def test_a_record_far_ahead_in_line_is_read_alone_first() -> None:
    """An urgent job's place (priority 0) is minutes ahead of a backlog's."""
    line = ReadLine(1000, 0.5, random.Random(5))
    line.reset([*listed("abcdefgh", 400.0), ("u", None, 100.0)])
    assert ids(line.take(1)) == "u"


def test_a_chunk_holds_at_most_chunk_records() -> None:
    line = ReadLine(2, 0.5, random.Random(4))
    line.reset(listed("abcde", 1.0))
    assert sorted(ids(line.take(2))) == ["a", "b"]
    assert sorted(ids(line.take(2))) == ["c", "d"]
    assert ids(line.take(2)) == "e"


def test_a_zero_window_reads_strictly_in_line_order() -> None:
    line = ReadLine(100, 0.0)
    line.reset([("a", None, 3.0), ("b", None, 1.0), ("c", None, 2.0)])
    assert ids(line.take(3)) == "bca"


def test_the_etag_the_cache_held_comes_back_with_the_id() -> None:
    line = ReadLine(10, 0.5)
    line.reset([("a", "etag-a", 1.0)])
    assert line.take(1) == [("a", "etag-a")]


def test_processes_start_at_different_points_of_the_same_order() -> None:
    entries = listed("abcdefghijklmnopqrstuvwxyz", 5.0)
    starts = set()
    for seed in range(20):
        line = ReadLine(100, 0.5, random.Random(seed))
        line.reset(entries)
        first = ids(line.take(26))
        assert is_rotation(first, "abcdefghijklmnopqrstuvwxyz")
        starts.add(first[0])
    assert len(starts) > 10


def test_a_jump_moves_within_the_current_chunk_only() -> None:
    line = ReadLine(8, 0.5, random.Random(3))
    line.reset(listed("abcdefgh", 10.0) + listed("XYZ", 20.0))
    taken = ids(line.take(2))
    for _ in range(5):
        line.jump()
    rest = ids(line.take(6))
    assert sorted(taken + rest) == list("abcdefgh")  # nothing lost or repeated
    assert is_rotation(ids(line.take(3)), "XYZ")


def test_reset_replaces_what_was_left() -> None:
    line = ReadLine(10, 0.5)
    line.reset(listed("abc", 1.0))
    line.reset(listed("x", 1.0))
    assert ids(line.take(5)) == "x"


def test_a_chunk_holds_at_least_one_record() -> None:
    with pytest.raises(ValueError, match="chunk must be at least 1"):
        ReadLine(0, 0.5)
