"""Dump packages in the `resourcesync` storage, whole or not at all.

A package is built in a scratch file and stored under a content-addressed
name (`<stem>.<etag>.zip`) like the documents (`sitemaps.storage`). With
local storage the scratch file lies beside its final place and is renamed
into it once flushed, so a package is never copied and a crash leaves only
a `.partial` file that cleanup removes; with S3 the finished file is
uploaded, and an upload is visible only once complete.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, cast

from django.core.files import File
from django.core.files.storage import FileSystemStorage

from sitemaps.storage import PARTIAL_SUFFIX, document_storage

from .packaging import file_digests

#: Scratch files of packages being built: `.package-<random>.partial`.
SCRATCH_PREFIX = ".package-"
DEFAULT_FILE_MODE = 0o644


@dataclass(frozen=True, slots=True)
class StoredPackage:
    """A package as stored: its storage name and what the Resource Dump says of it."""

    name: str
    etag: str
    size: int
    md5: str
    sha256: str


@contextmanager
def package_file(directory: str) -> Iterator[BinaryIO]:
    """A scratch file to build a package in; removed afterwards unless it was stored."""
    storage = document_storage()
    if isinstance(storage, FileSystemStorage):
        folder = Path(storage.path(directory))
        folder.mkdir(parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(
            dir=folder, prefix=SCRATCH_PREFIX, suffix=PARTIAL_SUFFIX
        )
    else:
        descriptor, name = tempfile.mkstemp(prefix="resourcesync-package-")
    os.close(descriptor)
    handle = open(name, "w+b")  # noqa: SIM115 - closed below; its name is the path
    try:
        yield handle
    finally:
        try:
            handle.close()  # on a full disk, flushing its buffer raises ENOSPC again
        finally:
            Path(name).unlink(missing_ok=True)


def store_package(handle: BinaryIO, directory: str, public_name: str) -> StoredPackage:
    """Store the finished package in `handle` under its content-addressed name."""
    size, md5, sha256 = file_digests(handle)
    etag = sha256[:32]
    name = f"{directory}/{public_name.removesuffix('.zip')}.{etag}.zip"
    storage = document_storage()
    if isinstance(storage, FileSystemStorage):
        _place_local(storage, handle, Path(storage.path(name)), size)
    else:
        if storage.exists(name):
            storage.delete(name)
        handle.seek(0)
        saved = storage.save(name, File(handle))
        if saved != name:
            storage.delete(saved)
            raise RuntimeError(f"The document storage saved {name!r} as {saved!r}.")
    return StoredPackage(name=name, etag=etag, size=size, md5=md5, sha256=sha256)


def _place_local(storage: FileSystemStorage, handle: BinaryIO, path: Path, size: int) -> None:
    """Rename the flushed scratch file into place (or keep the identical one already there)."""
    if path.is_file() and path.stat().st_size == size:
        os.utime(path)  # the same content (its name says so): cleanup keeps it a grace period
        return
    handle.flush()
    os.fsync(handle.fileno())
    os.chmod(handle.name, storage.file_permissions_mode or DEFAULT_FILE_MODE)
    os.replace(handle.name, path)
    descriptor = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(descriptor)  # the rename survives a crash
    finally:
        os.close(descriptor)


def open_stored(name: str) -> IO[bytes]:
    """A stored package for reading."""
    return cast(IO[bytes], document_storage().open(name, "rb"))
