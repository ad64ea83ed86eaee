"""`make run` serves where HOST and PORT say, and installs only what running needs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from lxml import etree, html

from ..conftest import REPO
from ..support import NS

#: Settings the portal reads from the environment; `make run` must not inherit the tests'.
PORTAL_VARIABLES = (
    "DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PUBLIC_BASE_URL", "ALLOWED_HOSTS",
    "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "ELASTICSEARCH_URL", "DATA_DIR",
    "MAKEFLAGS", "MAKELEVEL", "MFLAGS",
)  # fmt: skip


def make_env(**extra: str) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in PORTAL_VARIABLES}
    return {**env, **extra}


def dry_run(target: str, venv: Path) -> str:
    """The commands `make -n <target>` would run with this virtualenv."""
    result = subprocess.run(
        ["make", "-n", target, f"VENV={venv}"],
        cwd=REPO, env=make_env(), capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout


def installs(commands: str) -> list[str]:
    """The requirements files the commands pip-install."""
    return [
        line.split(" -r ")[1].strip() for line in commands.splitlines() if "pip install" in line
    ]


@pytest.fixture
def venv(tmp_path) -> Path:
    """A stand-in virtualenv (make -n only looks at its files' times)."""
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").touch()
    return tmp_path / "venv"


REQUIREMENTS = {"run": "requirements.txt", "dev": "requirements-dev.txt"}


def stamp(venv: Path, name: str, seconds: int) -> None:
    """Mark a requirements file as installed this long after the last change of
    either file, or (if negative) this long before the last change of its own."""
    path = venv / f".requirements-{name}.stamp"
    path.touch()
    files = REQUIREMENTS.values() if seconds > 0 else [REQUIREMENTS[name]]
    changed = max((REPO / f).stat().st_mtime for f in files)
    os.utime(path, (changed + seconds, changed + seconds))


def test_run_installs_the_runtime_requirements_only(venv):
    assert installs(dry_run("run", venv)) == ["requirements.txt"]
    for target in ("test", "lint", "bench"):
        assert installs(dry_run(target, venv)) == ["requirements.txt", "requirements-dev.txt"]


def test_each_requirements_file_installs_again_only_when_it_changed(venv):
    stamp(venv, "run", 100)
    stamp(venv, "dev", 200)
    assert installs(dry_run("run", venv)) == []
    assert installs(dry_run("test", venv)) == []
    stamp(venv, "dev", -100)  # requirements-dev.txt changed since
    assert installs(dry_run("run", venv)) == []
    assert installs(dry_run("lint", venv)) == ["requirements-dev.txt"]
    stamp(venv, "run", -200)  # requirements.txt too
    assert installs(dry_run("run", venv)) == ["requirements.txt"]
    assert installs(dry_run("lint", venv)) == ["requirements.txt", "requirements-dev.txt"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def wait_until_serving(url: str, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"make run exited:\n{log.read_text()[-4000:]}")
        try:
            get(url)
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
        else:
            return
    pytest.fail(f"Nothing answered at {url}:\n{log.read_text()[-4000:]}")


@pytest.fixture
def make_run(tmp_path):
    """Start `make run` with extra arguments on a fresh data folder; stop it afterwards."""
    processes: list[subprocess.Popen] = []
    # This test's own stamp, newer than requirements.txt: the running virtualenv has them.
    run_stamp = tmp_path / "run.stamp"
    run_stamp.touch()

    def start(*args: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / "make-run.log"
        command = ["make", "run", f"VENV={sys.prefix}", f"RUN_STAMP={run_stamp}", *args]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, cwd=REPO, env=make_env(DATA_DIR=str(tmp_path / "data")),
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        processes.append(process)
        return process, log

    yield start
    for process in processes:
        os.killpg(process.pid, signal.SIGTERM)  # make, runserver and its reloader child
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_make_run_serves_on_host_and_port_and_documents_name_them(make_run):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process, log = make_run("HOST=127.0.0.1", f"PORT={port}", "DEMO_ARTICLES=3")
    wait_until_serving(f"{base}/healthz", process, log)
    landing = html.fromstring(get(f"{base}/"))
    assert landing.xpath("//link[@rel='resourcesync']/@href") == [
        f"{base}/.well-known/resourcesync"
    ]
    description = etree.fromstring(get(f"{base}/.well-known/resourcesync"))
    locs = description.xpath("sm:url/sm:loc/text()", namespaces=NS)
    assert locs == [f"{base}/resourcesync/demo/articles/capabilitylist.xml"]
    resource_list = etree.fromstring(get(f"{base}/resourcesync/demo/articles/resourcelist.xml"))
    loc = resource_list.findtext("sm:url/sm:loc", namespaces=NS)
    assert loc.startswith(f"{base}/files/demo/articles/")
    assert get(loc).startswith((b"Demo article", b"<?xml"))
    output = log.read_text()
    assert f"Portal:       {base}/" in output and "Admin login: admin / " in output
