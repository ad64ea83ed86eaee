"""Where an export goes: a folder a static web server serves, or a ZIP for an administrator.

A folder export is incremental. `.resourcesync-export.json` in the folder
records the SHA-256 of every file it wrote (and, for a copied resource, the
source's size and mtime), so the next export writes only files whose bytes
changed, copies a resource only when its source looks changed, and removes
files the set no longer has. Each file is written under a temporary name and
renamed into place, so a web server never sends half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

STATE_FILE = ".resourcesync-export.json"
_CHUNK = 1024 * 1024


class UnsafeExportPath(ValueError):
    """A path that would leave the export folder or name nothing."""


def safe_relative(path: str) -> PurePosixPath:
    """`path` as a relative path inside the export, or UnsafeExportPath."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise UnsafeExportPath(f"{path!r} is not a plain relative path")
    if any("\\" in p or "\x00" in p for p in parts):
        raise UnsafeExportPath(f"{path!r} holds a backslash or NUL")
    return PurePosixPath(path)


@dataclass
class ExportCounts:
    written: int = 0
    unchanged: int = 0
    removed: int = 0
    bytes_written: int = 0
    written_paths: list[str] = field(default_factory=list)


class ExportTarget:
    """What every target does; `put_*` take a relative POSIX path."""

    def __init__(self) -> None:
        self.counts = ExportCounts()

    def put_bytes(self, path: str, data: bytes) -> None:
        """Store a document's bytes."""
        raise NotImplementedError

    def put_file(self, path: str, source: Path) -> None:
        """Store a copy of a local file (a resource)."""
        raise NotImplementedError

    def put_chunks(self, path: str, chunks: Iterable[bytes]) -> None:
        """Store a streamed file (a dump package)."""
        raise NotImplementedError

    def finish(self) -> None:
        """Make the export complete: remove what is gone, save state, close."""

    def abort(self) -> None:
        """Leave the previous export as it was, as far as possible."""

    def _wrote(self, path: str, size: int) -> None:
        self.counts.written += 1
        self.counts.bytes_written += size
        self.counts.written_paths.append(path)


def _sha256_of(handle_path: Path) -> str:
    digest = hashlib.sha256()
    with handle_path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class DirectoryTarget(ExportTarget):
    """An incremental copy in a folder; only changed files are written."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.previous: dict[str, dict] = self._load_state()
        self.current: dict[str, dict] = {}

    def _load_state(self) -> dict[str, dict]:
        try:
            return json.loads((self.root / STATE_FILE).read_text())["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return {}

    def _destination(self, path: str) -> Path:
        return self.root.joinpath(*safe_relative(path).parts)

    def _unchanged(self, path: str, record: dict) -> bool:
        """Same identity as last time (content hash, or a source's size and mtime)
        and the file still there with the size written."""
        before = self.previous.get(path)
        if before is None:
            return False
        identity = [key for key in ("sha256", "source") if key in record]
        if any(before.get(key) != record[key] for key in identity):
            return False
        try:
            return self._destination(path).stat().st_size == before.get("size")
        except OSError:
            return False

    def _keep(self, path: str, record: dict) -> None:
        self.current[path] = {**self.previous[path], **record}
        self.counts.unchanged += 1

    @contextmanager
    def _temporary(self, destination: Path) -> Iterator[Path]:
        """A temporary file beside `destination`, removed unless renamed into place: a
        write that fails (a full disk) leaves no half-written file in the served folder."""
        destination.parent.mkdir(parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(prefix=f".{destination.name}.", dir=destination.parent)
        os.close(descriptor)
        try:
            yield Path(name)
        finally:
            Path(name).unlink(missing_ok=True)

    def _place(self, path: str, temporary: Path, record: dict) -> None:
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, self._destination(path))
        self.current[path] = record
        self._wrote(path, record["size"])

    def put_bytes(self, path: str, data: bytes) -> None:
        record = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        if self._unchanged(path, record):
            self._keep(path, record)
            return
        with self._temporary(self._destination(path)) as temporary:
            temporary.write_bytes(data)
            self._place(path, temporary, record)

    def put_file(self, path: str, source: Path) -> None:
        status = source.stat()
        record = {"source": [status.st_size, status.st_mtime_ns], "size": status.st_size}
        if self._unchanged(path, record):
            self._keep(path, record)
            return
        with self._temporary(self._destination(path)) as temporary:
            shutil.copyfile(source, temporary)
            record["size"] = temporary.stat().st_size
            self._place(path, temporary, record)

    def put_chunks(self, path: str, chunks: Iterable[bytes]) -> None:
        with self._temporary(self._destination(path)) as temporary:
            digest, size = hashlib.sha256(), 0
            with temporary.open("wb") as handle:
                for chunk in chunks:
                    handle.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
            record = {"sha256": digest.hexdigest(), "size": size}
            if self._unchanged(path, record):
                self._keep(path, record)
                return
            self._place(path, temporary, record)

    def finish(self) -> None:
        for path in sorted(set(self.previous) - set(self.current)):
            try:
                self._destination(path).unlink(missing_ok=True)
            except (OSError, UnsafeExportPath):
                continue
            self.counts.removed += 1
        self._save_state(self.current)

    def abort(self) -> None:
        """Keep the previous state plus what was written: the next export redoes the rest."""
        self._save_state({**self.previous, **self.current})

    def _save_state(self, files: dict[str, dict]) -> None:
        state = self.root / STATE_FILE
        with self._temporary(state) as temporary:
            temporary.write_text(json.dumps({"files": files}, indent=0, sort_keys=True))
            os.replace(temporary, state)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class ZipTarget(ExportTarget):
    """Every file into one ZIP, written beside its final name and renamed when complete."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.temporary = path.with_name(f".{path.name}.partial")
        self.archive = zipfile.ZipFile(self.temporary, "w", zipfile.ZIP_DEFLATED)

    def put_bytes(self, path: str, data: bytes) -> None:
        self.archive.writestr(str(safe_relative(path)), data)
        self._wrote(path, len(data))

    def put_file(self, path: str, source: Path) -> None:
        self.archive.write(source, str(safe_relative(path)))
        self._wrote(path, source.stat().st_size)

    def put_chunks(self, path: str, chunks: Iterable[bytes]) -> None:
        size = 0
        with self.archive.open(str(safe_relative(path)), "w", force_zip64=True) as handle:
            for chunk in chunks:
                handle.write(chunk)
                size += len(chunk)
        self._wrote(path, size)

    def finish(self) -> None:
        self.archive.close()
        os.replace(self.temporary, self.path)

    def abort(self) -> None:
        try:
            self.archive.close()  # writes the central directory: fails again on a full disk
        finally:
            self.temporary.unlink(missing_ok=True)
