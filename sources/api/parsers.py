"""Read an events body as a stream: memory stays bounded by one event.

DRF calls a parser when the view first touches `request.data`; these parsers
receive the body (spooled to disk past a few MB) and return a lazy iterator
instead of a parsed document, which the validator drains before ingestion
takes any lock. The body is read in chunks and counted against
`INGEST_MAX_BODY_BYTES`, whatever Content-Length claimed; `request_events`
also reads chunked bodies, which Django would see as empty.
"""

from __future__ import annotations

import codecs
import itertools
import json
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson
from django.conf import settings
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

CHUNK_BYTES = 64 * 1024
#: Bodies larger than this wait on disk until the events are applied.
SPOOL_MEMORY_BYTES = 8 * 1024 * 1024
#: One event (one NDJSON line, one array element) may not be larger than this.
MAX_EVENT_BYTES = 1024 * 1024

_JSON_WHITESPACE = " \t\n\r"
#: Python refuses to convert longer integer literals (sys.get_int_max_str_digits).
MAX_INT_DIGITS = 4300


class OverlongNumber(str):
    """The digits of an integer too long to convert; validation refuses it by field name."""


def _parse_int(digits: str) -> int | OverlongNumber:
    if len(digits) > MAX_INT_DIGITS:
        return OverlongNumber(digits)
    return int(digits)


_json_decoder = json.JSONDecoder(parse_int=_parse_int)
#: Digits as "0", every other byte as " ": 19 zeros in a row may be an integer
#: outside 64 bits, which orjson reads as a float (a regex search cost 3x orjson).
_DIGITS_ONLY = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_LONG_NUMBER = b"0" * 19


def _has_long_number(line: bytes) -> bool:
    return _LONG_NUMBER in line.translate(_DIGITS_ONLY)


#: What a decoder says about a value nested deeper than Python's recursion limit.
TOO_DEEP = "is nested too deeply."


class BodyTooLarge(Exception):
    """The body exceeds the configured limit; answered with 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"is larger than the limit of {limit} bytes (INGEST_MAX_BODY_BYTES); send the "
            "events in several requests, each small enough to finish within the server's timeout."
        )
        self.limit = limit


class LengthRequired(Exception):
    """A chunked body this server cannot read (it does not decode the chunks); answered with 411."""


@dataclass(frozen=True, slots=True)
class MalformedEvent:
    """A place in the body that is not a JSON value; `message` says where."""

    message: str


RawEvent = object | MalformedEvent


def spooled(stream: IO[bytes], *, limit: int) -> Iterator[bytes]:
    """Receive the whole body first (in memory up to SPOOL_MEMORY_BYTES, then on disk).

    Events are applied under the set's write lock; spooling keeps a slow
    upload from holding that lock, while memory stays bounded.
    """
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES) as spool:
        for chunk in read_chunks(stream, limit=limit):
            spool.write(chunk)
        spool.seek(0)
        yield from read_chunks(spool, limit=limit)


def read_chunks(stream: IO[bytes], *, limit: int) -> Iterator[bytes]:
    """Yield the body in chunks, raising BodyTooLarge once more than `limit` bytes came."""
    total = 0
    while chunk := stream.read(CHUNK_BYTES):
        total += len(chunk)
        if total > limit:
            raise BodyTooLarge(limit)
        yield chunk


def iter_ndjson(chunks: Iterator[bytes]) -> Iterator[RawEvent]:
    """One JSON value per line; blank lines are skipped, a bad line does not stop the rest."""
    pending = b""
    line_number = 0
    for chunk in _without_bom(chunks):
        lines = (pending + chunk).split(b"\n")
        pending = lines.pop()
        for line in lines:
            line_number += 1
            if line.strip():
                yield _ndjson_value(line, line_number)
        if len(pending) > MAX_EVENT_BYTES:
            yield MalformedEvent(
                f"line {line_number + 1}: is longer than {MAX_EVENT_BYTES} bytes; "
                "the rest of the body was not read."
            )
            return
    if pending.strip():
        yield _ndjson_value(pending, line_number + 1)


def _without_bom(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """The body without a UTF-8 byte order mark at its start, which `iter_json` skips too."""
    head = b""
    for chunk in chunks:
        head += chunk
        if len(head) >= len(codecs.BOM_UTF8):
            break
    yield head.removeprefix(codecs.BOM_UTF8)
    yield from chunks


def _ndjson_value(line: bytes, line_number: int) -> RawEvent:
    """orjson first (faster, and it cannot misread what it accepts); `_json_decode` else."""
    if not _has_long_number(line):
        try:
            return orjson.loads(line)
        except orjson.JSONDecodeError:
            pass  # the json module's messages and its leniency (NaN, lone surrogates)
    return _json_decode(line, line_number)


def _json_decode(line: bytes, line_number: int) -> RawEvent:
    """The json module's reading: the reference for what a line holds or why it is refused."""
    try:
        return _json_decoder.decode(line.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return MalformedEvent(f"line {line_number}: is not UTF-8 ({exc.reason}).")
    except json.JSONDecodeError as exc:
        return MalformedEvent(f"line {line_number}: {exc.msg} (column {exc.colno}).")
    except RecursionError:
        return MalformedEvent(f"line {line_number}: {TOO_DEEP}")


class _Malformed(Exception):
    pass


class _TextReader:
    """Decoded body text read ahead just far enough to decode the next JSON value."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self.text = ""
        self.pos = 0
        self.eof = False
        # Line and column of text[0], for error messages.
        self._line = 1
        self._column = 1

    def fill(self) -> bool:
        """Append the next chunk; False once the body is exhausted."""
        if self.eof:
            return False
        chunk = next(self._chunks, None)
        try:
            decoded = self._decoder.decode(chunk or b"", final=chunk is None)
        except UnicodeDecodeError as exc:
            raise _Malformed(f"is not UTF-8 ({exc.reason}).") from exc
        self._drop_consumed()
        self.text += decoded
        if chunk is None:
            self.eof = True
        return True

    def _drop_consumed(self) -> None:
        consumed = self.pos
        if not consumed:
            return
        newlines = self.text.count("\n", 0, consumed)
        if newlines:
            self._line += newlines
            self._column = consumed - self.text.rfind("\n", 0, consumed)
        else:
            self._column += consumed
        self.text = self.text[consumed:]
        self.pos = 0

    def where(self, pos: int) -> str:
        newlines = self.text.count("\n", 0, pos)
        column = pos - self.text.rfind("\n", 0, pos) if newlines else self._column + pos
        return f"line {self._line + newlines} column {column}"

    def next_char(self) -> str:
        """Skip whitespace and return the next character, or "" at the end of the body."""
        while True:
            text, pos = self.text, self.pos
            while pos < len(text) and text[pos] in _JSON_WHITESPACE:
                pos += 1
            self.pos = pos
            if pos < len(text):
                return text[pos]
            if not self.fill():
                return ""

    def value(self) -> Any:
        """Decode the JSON value at the current position, reading more as needed."""
        while True:
            try:
                value, end = _json_decoder.raw_decode(self.text, self.pos)
            except RecursionError:
                raise _Malformed(f"{self.where(self.pos)}: {TOO_DEEP}") from None
            except json.JSONDecodeError as exc:
                if len(self.text) - self.pos > MAX_EVENT_BYTES:
                    raise _Malformed(
                        f"{self.where(self.pos)}: an event is longer than {MAX_EVENT_BYTES} "
                        "bytes or is not valid JSON."
                    ) from exc
                if not self.fill():
                    raise _Malformed(f"{self.where(exc.pos)}: {exc.msg}.") from exc
                continue
            # A number may continue in the next chunk; anything else is complete.
            number = isinstance(value, int | float | OverlongNumber)
            if end == len(self.text) and number and self.fill():
                continue
            self.pos = end
            return value

    def expect_end(self) -> None:
        if self.next_char():
            raise _Malformed(f"{self.where(self.pos)}: unexpected data after the events.")


def iter_json(chunks: Iterator[bytes]) -> Iterator[RawEvent]:
    """One event object or an array of them, decoded one element at a time.

    A syntax error ends the body: after it there is no telling where the
    next element starts.
    """
    reader = _TextReader(chunks)
    try:
        first = reader.next_char()
        if first == "\ufeff":
            reader.pos += 1
            first = reader.next_char()
        if first == "{":
            yield reader.value()
            reader.expect_end()
            return
        if first != "[":
            raise _Malformed("must be an event object or an array of event objects.")
        reader.pos += 1
        if reader.next_char() == "]":
            reader.pos += 1
            reader.expect_end()
            return
        while True:
            yield reader.value()
            separator = reader.next_char()
            if separator == "]":
                reader.pos += 1
                reader.expect_end()
                return
            if separator != ",":
                raise _Malformed(f"{reader.where(reader.pos)}: expected ',' or ']'.")
            reader.pos += 1
            reader.next_char()
    except _Malformed as exc:
        yield MalformedEvent(str(exc))


class _EventStreamParser(BaseParser):
    """Check the declared size up front, then hand the view a lazy event iterator."""

    def parse(
        self, stream: IO[bytes], media_type: str | None = None, parser_context: Any = None
    ) -> Iterator[RawEvent]:
        _check_charset(media_type or "")
        limit = settings.INGEST_MAX_BODY_BYTES
        request = (parser_context or {}).get("request")
        if request is not None:
            _check_content_encoding(request.META.get("HTTP_CONTENT_ENCODING", ""))
            declared = request.META.get("CONTENT_LENGTH") or "0"
            if declared.isdigit() and int(declared) > limit:
                raise BodyTooLarge(limit)
        chunks = spooled(stream, limit=limit)
        # Read the upload now, before the view takes any lock.
        first = next(chunks, b"")
        return self.iter_events(itertools.chain([first], chunks))

    def iter_events(self, chunks: Iterator[bytes]) -> Iterator[RawEvent]:
        raise NotImplementedError


class JSONEventsParser(_EventStreamParser):
    """`application/json`: one event object or an array of events."""

    media_type = "application/json"

    def iter_events(self, chunks: Iterator[bytes]) -> Iterator[RawEvent]:
        return iter_json(chunks)


class NDJSONEventsParser(_EventStreamParser):
    """`application/x-ndjson`: one event per line, the path for large batches."""

    media_type = "application/x-ndjson"

    def iter_events(self, chunks: Iterator[bytes]) -> Iterator[RawEvent]:
        return iter_ndjson(chunks)


def _check_charset(media_type: str) -> None:
    for parameter in media_type.split(";")[1:]:
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in {
            "utf-8",
            "utf8",
        }:
            raise UnsupportedMediaType(media_type, detail="Events must be encoded as UTF-8.")


class UnsupportedContentEncoding(UnsupportedMediaType):
    """A compressed body: 415, and `Accept-Encoding: identity` says what may be sent
    instead (RFC 7694, section 3)."""

    response_headers = {"Accept-Encoding": "identity"}


def _check_content_encoding(encoding: str) -> None:
    """A compressed body is refused by name: read as it came, it failed as "not UTF-8"."""
    codings = {coding.strip().lower() for coding in encoding.split(",")} - {"", "identity"}
    if codings:
        raise UnsupportedContentEncoding(
            encoding,
            detail=f"Content-Encoding {encoding!r} is not supported; send the body uncompressed.",
        )


def request_events(request: Request, parser_context: dict[str, Any]) -> Iterator[RawEvent] | None:
    """The body's events as a lazy iterator, or None for an empty body.

    A body sent with `Transfer-Encoding: chunked` has no Content-Length, so
    Django (and DRF) read it as empty; a server that decodes the chunks says
    so with `wsgi.input_terminated` (gunicorn does), and its input is read here.
    """
    meta = request.META
    chunked = "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower()
    if chunked and not meta.get("CONTENT_LENGTH"):
        if not meta.get("wsgi.input_terminated"):
            raise LengthRequired
        parser = request.negotiator.select_parser(request, request.parsers)
        if parser is None:
            raise UnsupportedMediaType(request.content_type)
        return parser.parse(meta["wsgi.input"], request.content_type, parser_context)
    items = request.data  # the parser's lazy iterator, {} for an empty body
    return items if isinstance(items, Iterator) else None
