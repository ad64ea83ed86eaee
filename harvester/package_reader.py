"""Reading the bitstreams of a downloaded dump package, by several threads at once.

`zipfile.ZipFile` parses the whole central directory when it opens (1.5 s of
CPU for a 50,000-member package) and must not be read by two threads at once,
so one archive per thread parsed it once per thread; and each member it opens
costs more than writing the member out. Here the directory is parsed once,
each thread reads through its own file handle, and a member is its local
header, its bytes (inflated if deflated, a bounded amount at a time) and a
check of its CRC-32 and size against the directory.
"""

from __future__ import annotations

import struct
import threading
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

CHUNK_SIZE = 64 * 1024
_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_ENCRYPTED = 0x1


class MemberError(Exception):
    """A member is missing, corrupt, encrypted or compressed in a way we do not read."""


class PackageReader:
    """The members of one ZIP package, by name; `chunks` may be called from any thread."""

    def __init__(self, path: Path) -> None:
        """Parse the central directory (raises zipfile.BadZipFile or OSError)."""
        with zipfile.ZipFile(path) as archive:
            self.members = {info.filename: info for info in archive.infolist()}
        self.path = path
        self._local = threading.local()
        self._lock = threading.Lock()
        self._handles: list[BinaryIO] = []

    def __enter__(self) -> PackageReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every thread's file handle."""
        with self._lock:
            handles, self._handles = self._handles, []
        for handle in handles:
            handle.close()

    def chunks(self, name: str) -> Iterator[bytes]:
        """The member's bytes; MemberError if it is absent or does not check out."""
        info = self.members.get(name)
        if info is None:
            raise MemberError(f"the package has no member {name!r}")
        if info.flag_bits & _ENCRYPTED:
            raise MemberError(f"cannot read member {name!r}: it is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise MemberError(f"cannot read member {name!r}: compression {info.compress_type}")
        handle = self._handle()
        handle.seek(info.header_offset)
        _skip_local_header(handle, info)
        return _checked(_inflated(handle, info), info)

    def _handle(self) -> BinaryIO:
        handle: BinaryIO | None = getattr(self._local, "handle", None)
        if handle is None:
            handle = self._local.handle = open(self.path, "rb")  # noqa: SIM115 - closed in close()
            with self._lock:
                self._handles.append(handle)
        return handle


def _skip_local_header(handle: BinaryIO, info: zipfile.ZipInfo) -> None:
    header = handle.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
        raise MemberError(f"corrupt member {info.filename!r}: bad local header")
    name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
    name = handle.read(name_length)
    if name.decode("utf-8" if info.flag_bits & 0x800 else "cp437") != info.filename:
        raise MemberError(f"corrupt member {info.filename!r}: its header names another file")
    handle.seek(extra_length, 1)


def _inflated(handle: BinaryIO, info: zipfile.ZipInfo) -> Iterator[bytes]:
    """The member's data, inflated at most CHUNK_SIZE bytes at a time (no ZIP bomb in memory)."""
    remaining = info.compress_size
    inflater = zlib.decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
    while remaining:
        data = handle.read(min(CHUNK_SIZE, remaining))
        if not data:
            raise MemberError(f"corrupt member {info.filename!r}: the package ends inside it")
        remaining -= len(data)
        if inflater is None:
            yield data
            continue
        while data:
            yield inflater.decompress(data, CHUNK_SIZE)
            data = inflater.unconsumed_tail
    if inflater is not None:
        yield inflater.flush()


def _checked(chunks: Iterator[bytes], info: zipfile.ZipInfo) -> Iterator[bytes]:
    """Pass the chunks on; at the end, fail unless size and CRC-32 match the directory."""
    crc, size = 0, 0
    try:
        for chunk in chunks:
            if chunk:
                crc = zlib.crc32(chunk, crc)
                size += len(chunk)
                if size > info.file_size:
                    raise MemberError(f"corrupt member {info.filename!r}: longer than listed")
                yield chunk
    except zlib.error as error:
        raise MemberError(f"corrupt member {info.filename!r}: {error}") from error
    if size != info.file_size or crc != info.CRC:
        raise MemberError(f"corrupt member {info.filename!r}: bad CRC-32 or size")
