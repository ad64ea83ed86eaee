"""The protocol layer stands apart from Django, so the harvester and the
validator can use it without a configured Django project."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = ["constants", "records", "xmlchars", "writer", "builders", "reader"]


def test_protocol_modules_import_without_django():
    imports = "; ".join(f"import sitemaps.protocol.{name}" for name in MODULES)
    check = (
        "import sys; assert not [m for m in sys.modules if m.split('.')[0] == 'django'], 'django'"
    )
    result = subprocess.run(
        [sys.executable, "-c", f"{imports}; {check}"],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},  # no DJANGO_SETTINGS_MODULE
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
