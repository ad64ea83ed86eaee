"""Generated documents in the `resourcesync` storage, with a gzip twin.

Each version gets a content-addressed name, so several web nodes can share
S3-compatible storage; the database row says which version is current. A
file under a version's name is only ever the whole version: local files are
written to a temporary name and renamed into place, and a file found under
the name is reused only when it holds exactly that content (a write cut short
by a full disk or a crash is never served). A superseded version stays
readable for a grace period; `sitemaps.cleanup` deletes it afterwards.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import uuid
import zlib
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from django.core.files.base import ContentFile, File
from django.core.files.storage import FileSystemStorage, Storage, storages
from django.utils import timezone
from isal import isal_zlib

from .models import RetiredDocument

GZIP_SUFFIX = ".gz"
#: ISA-L (`isal.igzip`) level of the gzip twins. On a 15 MB Resource List page
#: level 1 takes 16 ms against zlib level 1's 71 ms, and its file is 12% smaller
#: (1.99 against 2.25 MB); its level 0 is as fast but 50% larger. The output is
#: plain gzip: any client, nginx's gzip_static and Python's `gzip` read it.
GZIP_LEVEL = 1
#: End of the temporary name a local write goes through (`.<final name>.<uuid>.partial`;
#: a streamed one, whose final name is known only at its end, `.<public name>.<uuid>.partial`).
PARTIAL_SUFFIX = ".partial"
#: zlib's wbits for a gzip stream: `isal_zlib.compressobj` then writes a gzip
#: header without name or time, as `igzip.compress(..., mtime=0)` does.
GZIP_WBITS = 31
#: The twin is compressed in blocks of this size at fixed offsets, whoever writes it:
#: ISA-L's output can depend on how its input is cut, and the same content must
#: get the same twin whether it was streamed (`StreamedDocument`) or saved whole.
GZIP_BLOCK_BYTES = 64 * 1024


def document_storage() -> Storage:
    return storages["resourcesync"]


def content_etag(content: bytes) -> str:
    """128 bits of SHA-256: OpenSSL's is hardware-accelerated, about 2.5 times faster
    on a 15 MB page than Python's portable BLAKE2b."""
    return hashlib.sha256(content).hexdigest()[:32]


def save_document(directory: str, public_name: str, content: bytes) -> tuple[str, str]:
    """Store one version and its gzip copy; return (storage name, etag).

    Raises (OSError on a full disk) when either copy could not be stored whole,
    so the run fails and is retried; nothing is then left that a later save
    would take for this version.
    """
    etag = content_etag(content)
    storage = document_storage()
    name = version_name(directory, public_name, etag)
    twin = name + GZIP_SUFFIX
    # The twin first: the plain copy's presence then means both were written.
    if holds(storage, twin, content, gzipped=True):
        _touch(storage, twin)
    else:
        _store(storage, twin, gzip_twin(content))
    if holds(storage, name, content):
        _touch(storage, name)
    else:
        _store(storage, name, content)
    return name, etag


def version_name(directory: str, public_name: str, etag: str) -> str:
    """The storage name of one version: content-addressed, so web nodes can share it."""
    return f"{directory}/{public_name.removesuffix('.xml')}.{etag}.xml"


def gzip_twin(content: bytes) -> bytes:
    """The gzip copy served to clients that accept it (no name, mtime 0: same bytes each time)."""
    compressor = _gzip_compressor()
    view = memoryview(content)
    parts = [
        compressor.compress(view[start : start + GZIP_BLOCK_BYTES])
        for start in range(0, len(view), GZIP_BLOCK_BYTES)
    ]
    parts.append(compressor.flush())
    return b"".join(parts)


def _gzip_compressor():  # isal_zlib has no stub for its compressor's type
    return isal_zlib.compressobj(GZIP_LEVEL, isal_zlib.DEFLATED, GZIP_WBITS)


def holds(storage: Storage, name: str, content: bytes, *, gzipped: bool = False) -> bool:
    """Whether `name` exists with exactly `content` (a gzip twin: decompresses to it).

    The length is checked first, so a short plain file costs no read.
    """
    try:
        if not storage.exists(name):
            return False
        if not gzipped and storage.size(name) != len(content):
            return False
        with storage.open(name, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return False
    if gzipped:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return False
    return data == content


def _store(storage: Storage, name: str, data: bytes) -> None:
    """Put `data` under `name`, replacing whatever is there."""
    if isinstance(storage, FileSystemStorage):
        _write_local(storage, Path(storage.path(name)), data)
        return
    _upload(storage, name, ContentFile(data))


def _upload(storage: Storage, name: str, content: File) -> None:
    """Put `content` under `name` in an object store, replacing whatever is there."""
    # Object stores (S3) publish an upload only once it is complete.
    if storage.exists(name):
        storage.delete(name)
    saved = storage.save(name, content)
    if saved != name:
        storage.delete(saved)
        raise RuntimeError(f"The document storage saved {name!r} as {saved!r}.")


def _create_file(path: Path) -> BinaryIO:
    """A new file, readable as the umask allows (a web server serves it)."""
    return open(path, "xb")


def _write_local(storage: FileSystemStorage, path: Path, data: bytes) -> None:
    """Write beside `path` under a temporary name, flush it to disk, rename it into place.

    A full disk or a crash leaves at worst a `.partial` file (removed here,
    or by cleanup after a kill), never a short file under the version's name.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}")
    try:
        with _create_file(temporary) as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if storage.file_permissions_mode is not None:
            os.chmod(temporary, storage.file_permissions_mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)


class StreamedDocument:
    """One version stored as it is written, never held whole in memory.

    Its bytes go to a temporary file as they come, through a streaming gzip
    compressor into its twin's and through the ETag's hash; `save()` then
    stores both as `save_document` would: local files are renamed into place
    (no reader ever sees half of one), an object store gets each upload from
    its temporary file. Left unsaved (an error, a page the run redoes), the
    temporary files are removed on leaving the `with` block; after a kill,
    cleanup removes local ones, and others were never named.
    """

    def __init__(self, directory: str, public_name: str) -> None:
        self.directory, self.public_name = directory, public_name
        self.size = 0
        self.storage = document_storage()
        self._hash = hashlib.sha256()
        self._gzip = _gzip_compressor()
        self._uncompressed = bytearray()  # less than a GZIP_BLOCK_BYTES block
        self._temporary: list[Path] = []
        self._plain = self._open(public_name)
        try:
            self._twin = self._open(public_name + GZIP_SUFFIX)
        except BaseException:
            self._plain.close()
            self._remove_temporary()
            raise

    def _open(self, name: str) -> BinaryIO:
        """A temporary file beside the versions (local, for the rename), else unnamed."""
        if not isinstance(self.storage, FileSystemStorage):
            return tempfile.TemporaryFile()
        folder = Path(self.storage.path(self.directory))
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f".{name}.{uuid.uuid4().hex}{PARTIAL_SUFFIX}"
        self._temporary.append(path)
        return _create_file(path)

    def write(self, chunk: bytes) -> None:
        self._plain.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)
        pending = self._uncompressed
        pending += chunk
        whole = len(pending) - len(pending) % GZIP_BLOCK_BYTES
        if whole:
            with memoryview(pending) as view:
                for start in range(0, whole, GZIP_BLOCK_BYTES):
                    with view[start : start + GZIP_BLOCK_BYTES] as block:
                        self._twin.write(self._gzip.compress(block))
            del pending[:whole]

    def save(self) -> tuple[str, str]:
        """Store the version and its twin (the twin first, as `save_document`); (name, etag)."""
        self._twin.write(self._gzip.compress(self._uncompressed) + self._gzip.flush())
        etag = self._hash.hexdigest()[:32]
        name = version_name(self.directory, self.public_name, etag)
        for handle, target in ((self._twin, name + GZIP_SUFFIX), (self._plain, name)):
            if isinstance(self.storage, FileSystemStorage):
                self._rename(handle, Path(self.storage.path(target)))
            elif not _holds_upload(self.storage, target, handle):
                handle.seek(0)
                _upload(self.storage, target, File(handle))
        if self._temporary:
            _sync_directory(self._temporary[0].parent)
        return name, etag

    def _rename(self, handle: BinaryIO, path: Path) -> None:
        """Flush `handle` to disk and rename its temporary file to `path`."""
        handle.flush()
        os.fsync(handle.fileno())
        handle.close()
        temporary = Path(handle.name)
        if self.storage.file_permissions_mode is not None:  # type: ignore[attr-defined]
            os.chmod(temporary, self.storage.file_permissions_mode)  # type: ignore[attr-defined]
        os.replace(temporary, path)
        self._temporary.remove(temporary)

    def __enter__(self) -> StreamedDocument:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Closing flushes a buffer, which raises again on a full disk: each step runs anyway
        # (last in, first out), so no handle stays open and no partial file holds the room.
        with ExitStack() as steps:
            steps.callback(self._remove_temporary)
            steps.callback(self._twin.close)
            steps.callback(self._plain.close)

    def _remove_temporary(self) -> None:
        for path in self._temporary:
            path.unlink(missing_ok=True)


def _holds_upload(storage: Storage, name: str, handle: BinaryIO) -> bool:
    """Whether an object store already holds this version's upload under `name`.

    The name carries 128 bits of the content's SHA-256 and an object store
    publishes only whole uploads, so one of the same length is this content.
    """
    try:
        return storage.exists(name) and storage.size(name) == handle.tell()
    except FileNotFoundError:
        return False


def _sync_directory(directory: Path) -> None:
    """Make the rename durable: a crash must not bring back the old directory entry."""
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _touch(storage: Storage, name: str) -> None:
    """Mark a reused local file as just written, so cleanup leaves it for the grace period."""
    if isinstance(storage, FileSystemStorage):
        os.utime(storage.path(name))


def retire_documents(names: Iterable[str]) -> None:
    """Retire many superseded versions in one statement, in the caller's transaction.

    One statement, not a read then a write: on SQLite that fails at once when
    another connection (the run's heartbeat) committed in between.
    """
    now = timezone.now()
    RetiredDocument.objects.bulk_create(
        [RetiredDocument(name=name, retired_at=now) for name in sorted(set(names)) if name],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=["retired_at"],
    )


def delete_document(name: str) -> None:
    """Retire a superseded version (both copies): it is deleted after the grace period.

    A reader that read the row just before the swap may still be opening it.
    Versions retired longer ago go now (at most once a minute).
    """
    from .cleanup import expire_retired_when_due  # it imports this module

    retire_documents([name])
    expire_retired_when_due()
