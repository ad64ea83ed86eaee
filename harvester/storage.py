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
import os
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harvester.mapping import UnsafePathError, make_parents, refuse_symlinks
from sitemaps.protocol.reader import ParsedEntry

#: ResourceSync hash names and their hashlib equivalents.
HASHLIB_NAMES = {"md5": "md5", "sha-1": "sha1", "sha-256": "sha256"}
TEMP_PREFIX = ".resourcesync-"
TEMP_SUFFIX = ".part"
CHUNK_SIZE = 64 * 1024
#: What `open()` would create before the umask: read and write for everyone.
NEW_FILE_MODE = 0o666
# os.umask can only be read by setting it; done once, before any thread writes files.
_UMASK_AT_IMPORT = os.umask(0o022)
os.umask(_UMASK_AT_IMPORT)


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
) -> StoredFile:
    """Write `chunks` to `target` if they match `expected` and `limit`; else leave any old copy."""
    if limit is not None and expected.length is not None and expected.length > limit:
        raise SizeLimitError(f"the source lists {expected.length} bytes, over", limit)
    make_parents(destination, target)
    hashers = _hashers({*algorithms, *expected.hashes})
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
    temp_path = Path(temp_name)
    try:
        length = 0
        with os.fdopen(handle, "wb") as out:
            for chunk in chunks:
                length += len(chunk)
                if limit is not None and length > limit:
                    raise SizeLimitError("larger than", limit)
                if expected.length is not None and length > expected.length:
                    raise VerificationError(
                        f"more than the listed length of {expected.length} bytes"
                    )
                out.write(chunk)
                for hasher in hashers.values():
                    hasher.update(chunk)
        digests = {name: hasher.hexdigest() for name, hasher in hashers.items()}
        check(expected, length, digests)
        os.chmod(temp_path, NEW_FILE_MODE & ~current_umask())
        if modified is not None:
            timestamp = modified.timestamp()
            os.utime(temp_path, (timestamp, timestamp))
        _refuse_non_file(destination, target)
        os.replace(temp_path, target)
    except BaseException:
        temp_path.unlink(missing_ok=True)
        raise
    return StoredFile(length=length, digests=digests, mtime_ns=os.stat(target).st_mtime_ns)


def current_umask() -> int:
    """The process's umask, read without changing it (Linux), else as found at import."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return _UMASK_AT_IMPORT


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


def _refuse_non_file(destination: Path, target: Path) -> None:
    refuse_symlinks(destination, target)
    if os.path.lexists(target) and regular_file_stat(target) is None:
        raise UnsafePathError(f"{target} exists and is not a regular file")


def _hashers(algorithms: Iterable[str], data: bytes = b"") -> dict[str, hashlib._Hash]:
    # Fixity checks, not security: keeps md5 usable on FIPS-mode systems.
    return {
        name: hashlib.new(HASHLIB_NAMES[name], data, usedforsecurity=False) for name in algorithms
    }
