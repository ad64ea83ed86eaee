"""Checks of single values: datetimes, hashes, lengths, URLs.

Each returns a message, or None when the value is fine.
"""

from __future__ import annotations

import datetime as dt
import re

from sitemaps.protocol.reader import ResourceSyncParseError, parse_datetime

from .authority import Authority, is_absolute_http

#: Hex digest lengths of the algorithms the spec and resync know.
HASH_LENGTHS = {"md5": 32, "sha-1": 40, "sha-256": 64}
#: Attributes of `<rs:md>` and `<rs:ln>` that hold W3C Datetimes.
DATETIME_ATTRIBUTES = ("at", "completed", "from", "until", "datetime", "modified")
#: sitemaps.org: a `<loc>` is less than 2,048 characters.
MAX_LOC_LENGTH = 2047
_LOWER_HEX = re.compile(r"[0-9a-f]+")
_NON_NEGATIVE = re.compile(r"\d+")


def datetime_or_none(value: str | None) -> dt.datetime | None:
    """The parsed value, or None when absent or invalid (reported elsewhere)."""
    if value is None:
        return None
    try:
        return parse_datetime(value)
    except ResourceSyncParseError:
        return None


def datetime_problem(name: str, value: str) -> str | None:
    try:
        parse_datetime(value)
    except ResourceSyncParseError as error:
        return f"{name} {value!r} is not a W3C Datetime with a time zone ({error})"
    return None


def hash_problems(value: str) -> list[str]:
    """`algo:hexdigest` pairs, algorithms md5, sha-1, sha-256, lowercase hex of their length."""
    problems: list[str] = []
    seen: set[str] = set()
    tokens = value.split()
    if not tokens:
        return [f"hash {value!r} is empty"]
    for token in tokens:
        algorithm, _, digest = token.partition(":")
        if algorithm not in HASH_LENGTHS:
            problems.append(f"hash {token!r}: algorithm is not one of md5, sha-1, sha-256")
        elif algorithm in seen:
            problems.append(f"hash {value!r}: {algorithm} given twice")
        elif not _LOWER_HEX.fullmatch(digest) or len(digest) != HASH_LENGTHS[algorithm]:
            length = HASH_LENGTHS[algorithm]
            problems.append(f"hash {token!r}: {algorithm} needs {length} lowercase hex digits")
        seen.add(algorithm)
    return problems


def length_problem(value: str) -> str | None:
    if _NON_NEGATIVE.fullmatch(value.strip()):
        return None
    return f"length {value!r} is not a non-negative integer"


def loc_problem(loc: str | None, authority: Authority) -> str | None:
    """A `<loc>` must be absolute, short enough and within the source's authority."""
    if not loc:
        return "an entry has no <loc>"
    if not is_absolute_http(loc):
        return f"<loc> {loc!r} is not an absolute http(s) URL"
    if len(loc) > MAX_LOC_LENGTH:
        return f"<loc> is {len(loc)} characters long; the limit is {MAX_LOC_LENGTH}"
    if not authority.covers(loc):
        return f"<loc> {loc} is outside the source's authority ({authority})"
    return None


def attribute_problems(attributes: dict[str, str]) -> list[str]:
    """Form problems of one `<rs:md>` or `<rs:ln>`: datetimes, hash, length."""
    problems = [
        problem
        for name in DATETIME_ATTRIBUTES
        if name in attributes and (problem := datetime_problem(name, attributes[name]))
    ]
    if "hash" in attributes:
        problems += hash_problems(attributes["hash"])
    if "length" in attributes and (problem := length_problem(attributes["length"])):
        problems.append(problem)
    return problems
