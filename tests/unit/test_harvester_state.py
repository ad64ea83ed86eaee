"""The state kept beside the copies: round trip, ownership, atomic writes, the lock."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from harvester.state import (
    STATE_FILE,
    LocalCopy,
    StateError,
    SyncState,
    destination_lock,
    load_state,
    save_state,
)

URL = "https://source.example.org/capabilitylist.xml"


def test_fresh_destination_has_empty_state(tmp_path: Path) -> None:
    state = load_state(tmp_path, URL)

    assert (state.capability_list_url, state.synced_until, state.resources) == (URL, None, {})


def test_state_round_trips(tmp_path: Path) -> None:
    state = SyncState(
        capability_list_url=URL,
        synced_until=dt.datetime(2024, 1, 1, tzinfo=dt.UTC),
        last_mode="baseline",
        last_run_at=dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        resources={
            "https://source.example.org/a": LocalCopy(
                path="source.example.org/a",
                length=3,
                digests={"md5": "00"},
                mtime_ns=123,
                lastmod=dt.datetime(2023, 1, 1, tzinfo=dt.UTC),
            )
        },
        unsettled={"https://source.example.org/b": "GET https://source.example.org/b: 404"},
    )

    save_state(tmp_path, state)

    assert load_state(tmp_path, URL) == state
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE]


def test_state_of_another_source_is_refused(tmp_path: Path) -> None:
    save_state(tmp_path, SyncState(capability_list_url="https://other.example.org/cl.xml"))

    with pytest.raises(StateError, match=r"mirrors https://other\.example\.org/cl\.xml"):
        load_state(tmp_path, URL)


def test_damaged_state_is_reported(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")

    with pytest.raises(StateError, match="damaged"):
        load_state(tmp_path, URL)


def test_one_run_at_a_time(tmp_path: Path) -> None:
    def second_run() -> None:
        with destination_lock(tmp_path):
            pass

    with destination_lock(tmp_path), pytest.raises(StateError, match="another harvest is running"):
        second_run()

    second_run()  # the lock is released afterwards
