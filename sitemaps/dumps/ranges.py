"""HTTP Range requests (RFC 9110 § 14) for dump packages: resumable downloads.

One byte range is served as 206; several ranges, a malformed header or a
stale `If-Range` get the whole package (200), as the RFC allows; a range
past the end is 416.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.utils.http import parse_http_date_safe

_SINGLE = re.compile(r"bytes=(\d*)-(\d*)")


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes `start` to `end`, both included."""

    start: int
    end: int

    @property
    def length(self) -> int:
        return self.end - self.start + 1

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end}/{size}"


class Unsatisfiable(Exception):
    """The range lies wholly past the end (416)."""


def requested_range(header: str, size: int) -> ByteRange | None:
    """The one range asked for, or None to send everything; raises Unsatisfiable."""
    match = _SINGLE.fullmatch(header.strip().replace(" ", ""))
    if match is None:
        return None
    first, last = match.groups()
    if not first and not last:
        return None
    if not first:  # the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise Unsatisfiable
        return ByteRange(max(size - suffix, 0), size - 1)
    start = int(first)
    if start >= size:
        raise Unsatisfiable
    end = int(last) if last else size - 1
    if end < start:
        return None
    return ByteRange(start, min(end, size - 1))


def if_range_holds(header: str | None, etag: str, last_modified: int | None) -> bool:
    """Whether a Range may be honoured: no If-Range, or one naming the current version."""
    if header is None:
        return True
    header = header.strip()
    if header.startswith(('"', "W/")):
        return header == etag  # a strong comparison: weak tags never match
    when = parse_http_date_safe(header)
    return when is not None and last_modified is not None and when == last_modified
