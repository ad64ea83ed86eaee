"""The harvester against a live source that changes while it is read: resync-simulator.

resync-simulator 1.1.0 (a test dependency) runs as a real process, started by
`resync_simulator.py` beside this file, which applies its Python 3.11 fix at
run time. It creates, updates and deletes resources every few hundredths of a
second while the harvester runs a baseline, so resources vanish or change
between the Resource List and their GET. The baseline must still finish with
the list's `at` as its sync point, the incremental must settle what changed,
and the mirror must then match the source exactly.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from harvester import transfer
from harvester.audit import local_files
from harvester.config import HarvestConfig, config_from_mapping
from harvester.session import HarvestSession
from harvester.state import load_state
from harvester.sync import Mode, run_harvest
from sitemaps.protocol.reader import Document, ParsedEntry, parse_document

# Every harvest is recorded in the portal's journal.
pytestmark = pytest.mark.django_db

LAUNCHER = Path(__file__).with_name("resync_simulator.py")
RESOURCES = 60
EVENTS = 150
DELAY = 0.02  # seconds between changes: 150 changes take about 3 s
#: Each resource's download is held back this long, so the baseline spans many changes.
DOWNLOAD_PAUSE = 0.03


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Simulator:
    """A running resync-simulator process and its base URL."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}"
        self.log = log

    def wait_until(self, condition: Callable[[], bool], what: str) -> None:
        """Poll `condition`; fail with the simulator's output if it dies or takes too long."""
        deadline = time.monotonic() + 30
        while not condition():
            output = self.log.read_text(errors="replace")
            assert self.process.poll() is None, f"the simulator exited:\n{output}"
            assert time.monotonic() < deadline, f"waited 30 s for {what}:\n{output}"
            time.sleep(0.1)

    def document(self, name: str) -> Document:
        response = httpx.get(f"{self.url}/{name}", timeout=10)
        assert response.status_code == 200, response.text
        return parse_document(response.content)


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[Simulator]:
    """resync-simulator, serving and changing; its output goes to simulator.log."""
    port = free_port()
    command = [sys.executable, str(LAUNCHER), "--port", str(port), "--resources", str(RESOURCES)]
    command += ["--events", str(EVENTS), "--delay", str(DELAY), "--seed", "7"]
    log = tmp_path / "simulator.log"
    with log.open("wb") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    running = Simulator(process, port, log)
    try:
        running.wait_until(lambda: answers(f"{running.url}/capabilitylist.xml"), "its start")
        yield running
    finally:
        process.terminate()
        process.wait(timeout=10)


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def paced_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold each download back a little, whatever the machine's speed."""
    download = transfer.download_one

    def paced(session: HarvestSession, entry: ParsedEntry):
        time.sleep(DOWNLOAD_PAUSE)
        return download(session, entry)

    monkeypatch.setattr(transfer, "download_one", paced)


def make_config(base: str, destination: Path) -> HarvestConfig:
    return config_from_mapping(
        {
            "capability_list_url": f"{base}/capabilitylist.xml",
            "destination": str(destination),
            "concurrency": 2,
            "retries": 3,
            "backoff": 0.05,
            "timeout": 10,
        },
        base_dir=destination.parent,
    )


@pytest.mark.usefixtures("paced_downloads")
def test_baseline_while_the_source_changes_then_incremental_settles_it(
    simulator: Simulator, tmp_path: Path
) -> None:
    destination = tmp_path / "mirror"
    config = make_config(simulator.url, destination)

    baseline = run_harvest(config, Mode.BASELINE)

    assert baseline.failures == [], baseline.summary()
    assert baseline.gone + baseline.changed > 0, "nothing changed during the baseline"
    assert f"{baseline.gone} gone and {baseline.changed} changed while read" in (baseline.summary())
    state = load_state(destination, config.source_url)
    assert state.synced_until is not None
    assert state.synced_until == baseline.sync_point
    assert len(state.unsettled) == baseline.gone + baseline.changed

    # The simulator stops after EVENTS changes; then its Change List holds them all.
    simulator.wait_until(
        lambda: len(simulator.document("changelist.xml").entries) == EVENTS, "the last change"
    )
    incremental = run_harvest(config, Mode.INCREMENTAL)

    assert incremental.failures == [], incremental.summary()
    assert incremental.downloaded + incremental.deleted > 0
    assert load_state(destination, config.source_url).unsettled == {}
    audit = run_harvest(config, Mode.AUDIT)
    assert audit.audit is not None and audit.audit.in_sync, audit.as_dict()["audit"]
    listed = simulator.document("resourcelist.xml").entries
    assert len(local_files(destination)) == len(listed) == audit.audit.same
