"""Log lines as a process set up by the production settings writes them (`make run`,
gunicorn, a worker): each once, with DEBUG on or off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import logging
import django
django.setup()
logging.getLogger("django.request").warning("Bad Request: /probe")
"""


@pytest.mark.parametrize("debug", ["1", "0"])
def test_a_django_warning_is_written_once(tmp_path, debug):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env.update(
        DJANGO_SETTINGS_MODULE="resourcesync_portal.settings",
        DATA_DIR=str(tmp_path),
        DEBUG=debug,
        SECRET_KEY="a-key-for-this-test-only-" + "x" * 40,
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stderr.count("Bad Request: /probe") == 1, done.stderr
