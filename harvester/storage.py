"""Writing copies so that a bad transfer never replaces a good one.

Bytes go to a temporary file beside the target, are counted and hashed on the
way, and only a copy whose length and digests match what the source listed is
moved over the previous one with `os.replace` (atomic on one file system).
No copy grows past a size limit, whether or not the source lists a length,
and copies get the permissions the umask gives new files (`mkstemp` alone
would leave them readable by their owner only, which no web server serving
the mirror could read).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harvester.mapping import CheckedFolders, UnsafePathError, make_parents, refuse_symlinks
from sitemaps.protocol.reader import ParsedEntry

#: ResourceSync hash names and their hashlib equivalents.
HASHLIB_NAMES = {"md5": "md5", "sha-1": "sha1", "sha-256": "sha256"}
TEMP_PREFIX = ".resourcesync-"
TEMP_SUFFIX = ".part"
CHUNK_SIZE = 64 * 1024
#: What `open()` would create before the umask: read and write for everyone.
NEW_FILE_MODE = 0o666
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
#: Temporary names differ by process id and this counter (`next` on it is thread-safe).
_TEMP_NUMBERS = itertools.count()


class VerificationError(Exception):
    """The bytes received differ from what the source said they would be."""


class SizeLimitError(Exception):
    """A resource is larger than the configured `max_resource_bytes`."""

    def __init__(self, detail: str, limit: int) -> None:
        super().__init__(
            f"{detail} the limit of {limit} bytes (max_resource_bytes); "
            "raise it in the configuration to harvest this resource"
        )


@dataclass(frozen=True, slots=True)
class Expected:
    """What a copy must look like: its length and the digests we can check."""

    length: int | None = None
    hashes: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_entry(cls, entry: ParsedEntry, algorithms: Iterable[str]) -> Expected:
        """Keep the listed digests whose algorithm the configuration verifies."""
        wanted = set(algorithms)
        return cls(
            length=entry.length,
            hashes={name: value for name, value in entry.hash.items() if name in wanted},
        )


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A verified copy: its size, digests and the file's stat for later change checks."""

    length: int
    digests: dict[str, str]
    mtime_ns: int


def write_verified(
    destination: Path,
    target: Path,
    chunks: Iterable[bytes],
    expected: Expected,
    algorithms: Iterable[str],
    *,
    modified: dt.datetime | None = None,
    limit: int | None = None,
    checked: CheckedFolders | None = None,
) -> StoredFile:
    """Write `chunks` to `target` if they match `expected` and `limit`; else leave any old copy.

    No fsync: a copy is recorded in the state only once it is at its final
    path, and a crash before the state is saved leaves copies that the next
    run checks against their digests instead of downloading again.
    """
    if limit is not None and expected.length is not None and expected.length > limit:
        raise SizeLimitError(f"the source lists {expected.length} bytes, over", limit)
    make_parents(destination, target, checked)
    hashers = _hashers({*algorithms, *expected.hashes})
    handle, temp_path = _create_temporary(target.parent)
    try:
        length = _write_all(handle, chunks, hashers.values(), expected.length, limit)
        digests = {name: hasher.hexdigest() for name, hasher in hashers.items()}
        check(expected, length, digests)
        if modified is not None:
            timestamp = modified.timestamp()
            os.utime(handle, (timestamp, timestamp))
        mtime_ns = os.fstat(handle).st_mtime_ns
        os.close(handle)
        handle = -1
        _refuse_non_file(destination, target, checked)
        os.replace(temp_path, target)
    except BaseException:
        if handle >= 0:
            os.close(handle)
        os.unlink(temp_path)
        raise
    return StoredFile(length=length, digests=digests, mtime_ns=mtime_ns)


def _create_temporary(folder: Path) -> tuple[int, str]:
    """A new empty file in `folder`, named for the harvester, with the umask's permissions.

    `os.open` with mode 0o666 lets the kernel apply the umask, as `open()` does;
    `mkstemp` would leave the copy readable by its owner only.
    """
    while True:
        number = next(_TEMP_NUMBERS)
        name = os.path.join(folder, f"{TEMP_PREFIX}{os.getpid()}-{number}{TEMP_SUFFIX}")
        try:
            return os.open(name, _TEMP_FLAGS, NEW_FILE_MODE), name
        except FileExistsError:
            continue  # left by an earlier run with the same process id


def _write_all(
    handle: int,
    chunks: Iterable[bytes],
    hashers: Iterable[hashlib._Hash],
    listed: int | None,
    limit: int | None,
) -> int:
    """Write and hash every chunk, stopping at the size limit or past the listed length."""
    hashers = tuple(hashers)
    length = 0
    for chunk in chunks:
        length += len(chunk)
        if limit is not None and length > limit:
            raise SizeLimitError("larger than", limit)
        if listed is not None and length > listed:
            raise VerificationError(f"more than the listed length of {listed} bytes")
        view = memoryview(chunk)
        while view:
            view = view[os.write(handle, view) :]
        for hasher in hashers:
            hasher.update(chunk)
    return length


def check(expected: Expected, length: int, digests: dict[str, str]) -> None:
    """Raise VerificationError naming the first property that differs."""
    if expected.length is not None and length != expected.length:
        raise VerificationError(f"length is {length} bytes, the source lists {expected.length}")
    for name, value in expected.hashes.items():
        actual = digests.get(name)
        if actual is not None and actual != value.lower():
            raise VerificationError(f"{name} is {actual}, the source lists {value}")


def file_digests(path: Path, algorithms: Iterable[str]) -> tuple[int, dict[str, str]]:
    """Length and digests of a local file, read in chunks."""
    hashers = _hashers(algorithms)
    length = 0
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_SIZE):
            length += len(chunk)
            for hasher in hashers.values():
                hasher.update(chunk)
    return length, {name: hasher.hexdigest() for name, hasher in hashers.items()}


def bytes_digests(data: bytes, algorithms: Iterable[str]) -> dict[str, str]:
    """Digests of an in-memory document."""
    return {name: hasher.hexdigest() for name, hasher in _hashers(algorithms, data).items()}


def regular_file_stat(path: Path) -> os.stat_result | None:
    """The file's stat if it is a regular file (not a link or folder), else None."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def remove_copy(destination: Path, target: Path) -> bool:
    """Delete the copy at `target`; False when there was nothing to delete."""
    refuse_symlinks(destination, target)
    if regular_file_stat(target) is None:
        return False
    target.unlink()
    return True


def _refuse_non_file(
    destination: Path, target: Path, checked: CheckedFolders | None = None
) -> None:
    if checked is None or os.fspath(target.parent) not in checked:
        refuse_symlinks(destination, target)
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise UnsafePathError(f"{target} exists and is not a regular file")


def _hashers(algorithms: Iterable[str], data: bytes = b"") -> dict[str, hashlib._Hash]:
    # Fixity checks, not security: keeps md5 usable on FIPS-mode systems.
    return {
        name: hashlib.new(HASHLIB_NAMES[name], data, usedforsecurity=False) for name in algorithms
    }
