"""What a process set up by the production settings does when it starts (`make run`,
gunicorn, a worker, a command), each check in a fresh interpreter, as a command would.

It imports only the Elasticsearch it is configured for: `manage.py harvest`
spent about a second of CPU in `django.setup()`, a third of it importing the
Elasticsearch client and django-elasticsearch-dsl's Documents, and psycopg on
SQLite. And it writes each log line once, DEBUG on or off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import json, sys
import django
django.setup()
import harvester.management.commands.harvest
from django.apps import apps
from django.conf import settings
modules = sorted(
    m for m in ("elasticsearch", "django_elasticsearch_dsl", "psycopg") if m in sys.modules
)
app = apps.is_installed("django_elasticsearch_dsl")
if app:
    from django_elasticsearch_dsl.registries import registry
documents = sorted(d.__name__ for d in registry.get_documents()) if app else []
generator = settings.RESOURCESYNC_GENERATORS["default"]["BACKEND"]
print(json.dumps({"modules": modules, "app": app, "documents": documents, "generator": generator}))
"""


def start(tmp_path: Path, **env: str) -> dict:
    """`django.setup()` and the harvest command's imports, in a process of their own."""
    done = run_set_up(SCRIPT, tmp_path, **env)
    return json.loads(done.stdout.splitlines()[-1])


def run_set_up(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter with the production settings and only `env`'s
    services."""
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in ("ELASTICSEARCH_URL", "DATABASE_URL", "CELERY_BROKER_URL", "SECRET_KEY")
    }
    clean.update(
        {"DJANGO_SETTINGS_MODULE": "resourcesync_portal.settings", "DATA_DIR": str(tmp_path)}
    )
    clean.update(env)
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=clean,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )


def test_the_database_generator_imports_no_elasticsearch_and_sqlite_no_psycopg(tmp_path):
    started = start(tmp_path)
    assert started["generator"].endswith("DatabaseGenerator")
    assert started["modules"] == []
    assert started["app"] is False


def test_the_elasticsearch_generator_loads_its_app_and_documents(tmp_path):
    started = start(tmp_path, ELASTICSEARCH_URL="http://127.0.0.1:9")  # never contacted
    assert started["generator"].endswith("ElasticsearchGenerator")
    assert started["app"] is True
    assert "elasticsearch" in started["modules"]
    assert "django_elasticsearch_dsl" in started["modules"]
    assert started["documents"] == ["ChangeDocument", "ResourceDocument"]


LOG_A_WARNING = """
import logging
import django
django.setup()
logging.getLogger("django.request").warning("Bad Request: /probe")
"""


@pytest.mark.parametrize("debug", ["1", "0"])
def test_a_django_warning_is_written_once(tmp_path, debug):
    key = "a-key-for-this-test-only-" + "x" * 40
    done = run_set_up(LOG_A_WARNING, tmp_path, DEBUG=debug, SECRET_KEY=key)
    assert done.stderr.count("Bad Request: /probe") == 1, done.stderr
