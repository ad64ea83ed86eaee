"""What a destination remembers between runs, kept beside the copies.

`<destination>/.resourcesync-state.json` holds the source it mirrors, the sync
point (the time up to which it is known to be in step, which the next
incremental run starts from) and a record per resource copied (its path,
length, digests and the file's mtime), so an interrupted run resumes by
skipping copies that are already right without hashing them again, and the
resources a baseline found gone or changed when it fetched them, which the
next incremental run must settle. The file
is replaced atomically and rewritten at checkpoints during a run; the sync
point moves only when a run finishes without failures. A lock file keeps two
runs off the same destination.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = ".resourcesync-state.json"
LOCK_FILE = ".resourcesync.lock"
STATE_VERSION = 1


class StateError(Exception):
    """The state file is unreadable, belongs to another source, or is locked."""


@dataclass(frozen=True, slots=True)
class LocalCopy:
    """A copy as it was written: enough to tell later whether it is still the same."""

    path: str
    length: int
    digests: dict[str, str] = field(default_factory=dict)
    mtime_ns: int = 0
    lastmod: dt.datetime | None = None


@dataclass(slots=True)
class SyncState:
    """The destination's memory of its source."""

    capability_list_url: str
    synced_until: dt.datetime | None = None
    last_mode: str | None = None
    last_run_at: dt.datetime | None = None
    resources: dict[str, LocalCopy] = field(default_factory=dict)
    #: URI -> what a baseline found (gone, or different from its listing), to settle.
    unsettled: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict; datetimes as ISO strings."""
        return {
            "version": STATE_VERSION,
            "capability_list_url": self.capability_list_url,
            "synced_until": _iso(self.synced_until),
            "last_mode": self.last_mode,
            "last_run_at": _iso(self.last_run_at),
            "resources": {
                uri: {
                    "path": record.path,
                    "length": record.length,
                    "digests": record.digests,
                    "mtime_ns": record.mtime_ns,
                    "lastmod": _iso(record.lastmod),
                }
                for uri, record in sorted(self.resources.items())
            },
            "unsettled": dict(sorted(self.unsettled.items())),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SyncState:
        """Rebuild the state written by `to_json`."""
        if data.get("version") != STATE_VERSION:
            raise StateError(f"unsupported state version {data.get('version')!r}")
        return cls(
            capability_list_url=str(data["capability_list_url"]),
            synced_until=_datetime(data.get("synced_until")),
            last_mode=data.get("last_mode"),
            last_run_at=_datetime(data.get("last_run_at")),
            resources={
                uri: LocalCopy(
                    path=str(item["path"]),
                    length=int(item["length"]),
                    digests={str(k): str(v) for k, v in item.get("digests", {}).items()},
                    mtime_ns=int(item.get("mtime_ns", 0)),
                    lastmod=_datetime(item.get("lastmod")),
                )
                for uri, item in data.get("resources", {}).items()
            },
            unsettled={str(k): str(v) for k, v in data.get("unsettled", {}).items()},
        )


def load_state(destination: Path, capability_list_url: str) -> SyncState:
    """The saved state, or a fresh one; refuses a destination kept for another source."""
    path = destination / STATE_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return SyncState(capability_list_url=capability_list_url)
    try:
        state = SyncState.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError) as error:
        raise StateError(f"{path} is damaged ({error}); move it away to start afresh") from error
    if state.capability_list_url != capability_list_url:
        raise StateError(
            f"{destination} mirrors {state.capability_list_url}, not {capability_list_url}"
        )
    return state


def mirrored_source(destination: Path) -> str | None:
    """The Capability List whose copy `destination` holds, if it holds one."""
    try:
        text = (destination / STATE_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return str(json.loads(text)["capability_list_url"])
    except (ValueError, KeyError, TypeError) as error:
        raise StateError(f"{destination / STATE_FILE} is damaged ({error})") from error


def save_state(destination: Path, state: SyncState) -> None:
    """Write the state atomically."""
    write_json(destination / STATE_FILE, state.to_json())


def write_json(path: Path, data: Any) -> None:
    """Write `data` to `path` atomically: a crash leaves the old file or the new, never half."""
    handle, temp_name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            # One compact `dumps`: the C encoder, several times faster than `dump` with
            # an indent for the tens of MB a large destination's state takes.
            out.write(json.dumps(data, separators=(",", ":")))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


@contextmanager
def destination_lock(destination: Path) -> Iterator[None]:
    """Hold an exclusive lock on the destination for the length of a run."""
    with (destination / LOCK_FILE).open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            raise StateError(f"another harvest is running on {destination}") from error
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _datetime(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    parsed = dt.datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        raise ValueError(f"naive datetime {value!r} in state")
    return parsed
