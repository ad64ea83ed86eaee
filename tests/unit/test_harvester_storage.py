"""Writing copies: verified before they replace anything."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.storage import (
    Expected,
    SizeLimitError,
    VerificationError,
    file_digests,
    write_verified,
)

CONTENT = b"resource content"
MD5 = hashlib.md5(CONTENT, usedforsecurity=False).hexdigest()
SHA256 = hashlib.sha256(CONTENT).hexdigest()
ALGORITHMS = ("md5", "sha-256")


def test_verified_copy_is_written_with_its_digests_and_lastmod(tmp_path: Path) -> None:
    target = tmp_path / "host" / "a" / "b"
    modified = dt.datetime(2020, 5, 17, 12, tzinfo=dt.UTC)

    stored = write_verified(
        tmp_path,
        target,
        [CONTENT[:5], CONTENT[5:]],
        Expected(length=len(CONTENT), hashes={"md5": MD5, "sha-256": SHA256.upper()}),
        ALGORITHMS,
        modified=modified,
    )

    assert target.read_bytes() == CONTENT
    assert (stored.length, stored.digests) == (len(CONTENT), {"md5": MD5, "sha-256": SHA256})
    assert target.stat().st_mtime == modified.timestamp()
    assert file_digests(target, ALGORITHMS) == (len(CONTENT), stored.digests)


@pytest.mark.parametrize(
    ("expected", "message"),
    [
        (Expected(hashes={"md5": "0" * 32}), "md5 is"),
        (Expected(hashes={"sha-256": "f" * 64}), "sha-256 is"),
        (Expected(length=len(CONTENT) + 1), "length is"),
        (Expected(length=3), "more than the listed length"),
    ],
)
def test_mismatch_keeps_the_previous_copy(tmp_path: Path, expected: Expected, message: str) -> None:
    target = tmp_path / "host" / "a"
    target.parent.mkdir()
    target.write_bytes(b"previous")

    with pytest.raises(VerificationError, match=message):
        write_verified(tmp_path, target, [CONTENT], expected, ALGORITHMS)

    assert target.read_bytes() == b"previous"
    assert [p.name for p in target.parent.iterdir()] == ["a"]


def test_failure_while_streaming_leaves_no_temporary_file(tmp_path: Path) -> None:
    def broken_stream() -> Iterator[bytes]:
        yield b"half"
        raise ConnectionError("dropped")

    with pytest.raises(ConnectionError):
        write_verified(tmp_path, tmp_path / "host" / "a", broken_stream(), Expected(), ALGORITHMS)

    assert list((tmp_path / "host").iterdir()) == []


def test_copies_are_readable_as_the_umask_allows(tmp_path: Path) -> None:
    """A web server serving the mirror must be able to read what the harvester wrote."""
    previous = os.umask(0o022)
    try:
        target = tmp_path / "host" / "a"
        write_verified(tmp_path, target, [CONTENT], Expected(), ALGORITHMS)
    finally:
        os.umask(previous)

    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.parametrize("listed", [{}, {"md5": MD5}], ids=["nothing", "hash-only"])
def test_a_copy_listed_without_length_stops_at_the_size_limit(
    tmp_path: Path, listed: dict[str, str]
) -> None:
    chunks = [b"x" * 10] * 10  # 100 bytes against a limit of 50

    with pytest.raises(SizeLimitError, match="larger than the limit of 50 bytes"):
        write_verified(
            tmp_path,
            tmp_path / "host" / "a",
            iter(chunks),
            Expected(hashes=listed),
            ALGORITHMS,
            limit=50,
        )

    assert list((tmp_path / "host").iterdir()) == []


def test_a_listed_length_over_the_limit_is_refused_before_reading(tmp_path: Path) -> None:
    def never_read() -> Iterator[bytes]:
        raise AssertionError("the body must not be read")
        yield b""

    with pytest.raises(SizeLimitError, match="lists 100 bytes, over the limit of 50 bytes"):
        write_verified(
            tmp_path,
            tmp_path / "host" / "a",
            never_read(),
            Expected(length=100),
            ALGORITHMS,
            limit=50,
        )
