"""Fixtures for tests against the real services: Elasticsearch, Redis, Celery.

`make test` starts Elasticsearch and Redis (scripts/services.sh) and sets
ELASTICSEARCH_TEST_URL and REDIS_TEST_URL. A test that needs a service asks for
its fixture; when the variable is unset or the service does not answer, the
test fails (never skips), so a green run has really exercised the services.

- `elasticsearch_url`, `elasticsearch_client` (session): the node's URL, a client.
- `redis_url` (session): a Redis database reserved for the tests.
- `celery_worker` (function): a real `celery worker` process on that Redis,
  sharing the test's database; while it runs, tasks sent by the test
  (`.delay()`, `send_task`, after-commit hooks) go to it, with results in Redis.
  It implies a transactional test DB, as `django_db(transaction=True)` does.
  Override `celery_worker_env` (a dict) to give the worker more environment,
  e.g. ELASTICSEARCH_URL, and `celery_worker_includes` (module names) to make
  it import task modules that autodiscovery does not find.

Tests using these fixtures get the `elasticsearch` / `redis` markers
automatically, so `pytest -m "not elasticsearch and not redis"` runs the rest.

When a collected test uses `celery_worker`, `file_database` or `database_url`
(for a subprocess of its own), the SQLite test database is a file (not
pytest-django's faster in-memory one) so that another process (a worker, a
gunicorn, `manage.py`) or another thread's connection can open it.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOW_TO_START = (
    "Run the tests with `make test`, which starts Elasticsearch and Redis, or start them "
    "with `scripts/services.sh start` and set {var}={example}."
)


def _service_url(var: str, example: str) -> str:
    url = os.environ.get(var, "").strip().rstrip("/")
    if not url:
        message = f"{var} is not set. " + HOW_TO_START.format(var=var, example=example)
        pytest.fail(message, pytrace=False)
    return url


def _not_answering(var: str, url: str, error: Exception) -> None:
    message = f"Nothing answers at {var}={url} ({error}). "
    pytest.fail(message + HOW_TO_START.format(var=var, example=url), pytrace=False)


NEEDS_FILE_DB = pytest.StashKey[bool]()
#: Fixtures whose tests need the SQLite test database in a file.
FILE_DB_FIXTURES = frozenset({"celery_worker", "file_database", "database_url"})
_service_outcomes: dict[str, dict[str, int]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Count what the service-backed tests did, for the summary below."""
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    for marker in ("elasticsearch", "redis"):
        if marker in report.keywords:
            counts = _service_outcomes.setdefault(marker, {})
            counts[report.outcome] = counts.get(report.outcome, 0) + 1


def pytest_terminal_summary(terminalreporter) -> None:
    """Show that the tests against the real services ran, and how they ended."""
    for marker, counts in sorted(_service_outcomes.items()):
        outcomes = ", ".join(f"{count} {outcome}" for outcome, count in sorted(counts.items()))
        terminalreporter.write_line(f"tests against the real {marker} service: {outcomes}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        names = getattr(item, "fixturenames", ())
        params = getattr(getattr(item, "callspec", None), "params", {})
        if {"elasticsearch_url", "use_elasticsearch"} & set(names) or (
            params.get("backend") == "elasticsearch"
        ):
            item.add_marker(pytest.mark.elasticsearch)
        if "redis_url" in names:
            item.add_marker(pytest.mark.redis)
    config.stash[NEEDS_FILE_DB] = any(
        FILE_DB_FIXTURES & set(getattr(item, "fixturenames", ())) for item in items
    )


@pytest.fixture(params=["database", "elasticsearch"])
def backend(request, settings) -> str:
    """A behaviour test that asks for it runs once per generator."""
    if request.param == "elasticsearch":
        request.getfixturevalue("use_elasticsearch")
    else:
        settings.RESOURCESYNC_GENERATORS = {
            "default": {"BACKEND": "sources.generators.database.DatabaseGenerator"}
        }
    return request.param


@pytest.fixture(scope="session")
def django_db_modify_db_settings(
    django_db_modify_db_settings_parallel_suffix: None,
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """When a test runs a Celery worker, put the SQLite test database in a file it
    can open; otherwise keep pytest-django's faster in-memory one."""
    from django.db import connections

    db = connections["default"].settings_dict
    needed = request.config.stash.get(NEEDS_FILE_DB, True)
    if needed and db["ENGINE"] == "django.db.backends.sqlite3":
        db.setdefault("TEST", {})["NAME"] = str(tmp_path_factory.mktemp("db") / "test.sqlite3")


@pytest.fixture
def file_database(transactional_db: None) -> None:
    """Ask for a file-based, transactional test database (see FILE_DB_FIXTURES)."""


@pytest.fixture(scope="session")
def elasticsearch_url() -> str:
    url = _service_url("ELASTICSEARCH_TEST_URL", "http://127.0.0.1:9200")
    try:
        # Not GET /: the test distribution (integ-test-zip) has no root endpoint.
        with urllib.request.urlopen(f"{url}/_cluster/health", timeout=10) as response:
            health = json.load(response)
    except OSError as exc:
        error = exc
    else:
        if health.get("status") in ("green", "yellow"):
            return url
        error = RuntimeError(f"cluster health {health.get('status')}")
    _not_answering("ELASTICSEARCH_TEST_URL", url, error)


@pytest.fixture(scope="session")
def elasticsearch_client(elasticsearch_url: str):
    from elasticsearch import Elasticsearch

    client = Elasticsearch(elasticsearch_url, request_timeout=30)
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_url() -> str:
    import redis

    url = _service_url("REDIS_TEST_URL", "redis://127.0.0.1:6379/15")
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=5) as client:
            client.ping()
    except redis.RedisError as exc:
        error = exc
    else:
        return url
    _not_answering("REDIS_TEST_URL", url, error)


@dataclass
class CeleryWorker:
    """A running `celery worker` subprocess."""

    process: subprocess.Popen
    broker_url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.process.poll() is not None:
                pytest.fail(f"The Celery worker exited:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{text!r} not in the Celery worker's log:\n{self.log()[-4000:]}")
            time.sleep(0.1)


def _database_url(db: dict) -> str:
    if db["ENGINE"] == "django.db.backends.sqlite3":
        name = str(db["NAME"])
        if name == ":memory:" or "mode=memory" in name:
            pytest.fail("celery_worker needs a file-based test database, not in-memory SQLite.")
        return f"sqlite:///{Path(name).resolve()}"
    if db["ENGINE"] == "django.db.backends.postgresql":
        from urllib.parse import quote

        auth = f"{quote(db['USER'] or '')}:{quote(db['PASSWORD'] or '')}@"
        host = f"{quote(db['HOST'] or '', safe='')}:{db['PORT'] or ''}"
        return f"postgres://{auth}{host}/{quote(db['NAME'])}"
    pytest.fail(f"celery_worker does not know how to share a {db['ENGINE']} database.")


def _reset_celery_clients(app) -> None:
    """Forget cached broker connections and result backend, so new settings apply."""
    from kombu import pools

    pools.reset()  # closes and forgets every pooled connection and producer
    app._pool = None
    if "amqp" in app.__dict__:
        app.amqp._producer_pool = None
    app._backend_cache = None
    vars(app._local).pop("backend", None)


@pytest.fixture
def database_url(transactional_db: None) -> str:
    """DATABASE_URL of the test database, for a subprocess (`manage.py ...`) to share it."""
    from django.db import connection

    return _database_url(connection.settings_dict)


@pytest.fixture
def celery_worker_env() -> dict[str, str]:
    """Extra environment for the worker; override in a test module."""
    return {}


@pytest.fixture
def celery_worker_includes() -> list[str]:
    """Extra task modules for the worker to import (`-I`); override in a test module."""
    return []


@pytest.fixture
def celery_worker(
    redis_url: str,
    transactional_db: None,
    settings,
    tmp_path: Path,
    celery_worker_env: dict[str, str],
    celery_worker_includes: list[str],
):
    """A real worker on `redis_url`, sharing the test database; yields a CeleryWorker."""
    import redis
    from django.db import connection

    from resourcesync_portal.celery import app

    # Messages left by an interrupted run would otherwise reach this worker.
    with redis.Redis.from_url(redis_url) as client:
        client.flushdb()

    env = {
        **os.environ,
        # Not settings.SETTINGS_MODULE: it reads None once a test overrides a setting.
        "DJANGO_SETTINGS_MODULE": os.environ["DJANGO_SETTINGS_MODULE"],
        "CELERY_BROKER_URL": redis_url,
        "CELERY_RESULT_BACKEND": redis_url,
        "DATABASE_URL": _database_url(connection.settings_dict),
        **celery_worker_env,
    }
    command = [
        sys.executable, "-m", "celery", "-A", "resourcesync_portal", "worker",
        "--pool=solo", "--concurrency=1", "-l", "info",
        "--without-gossip", "--without-mingle", "--without-heartbeat",
        "-n", f"pytest-{os.getpid()}@%h",
    ]  # fmt: skip
    for module in celery_worker_includes:
        command += ["-I", module]
    log_path = tmp_path / "celery-worker.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    worker = CeleryWorker(process=process, broker_url=redis_url, log_path=log_path)
    try:
        worker.wait_for_log(" ready.", timeout=60)

        # This process now sends to the worker's broker instead of running eagerly.
        # The Celery app reads these from Django settings, restored after the test.
        settings.CELERY_BROKER_URL = redis_url
        settings.CELERY_RESULT_BACKEND = redis_url
        settings.CELERY_TASK_ALWAYS_EAGER = False
        _reset_celery_clients(app)
        yield worker
    finally:
        _reset_celery_clients(app)
        process.send_signal(signal.SIGTERM)  # warm shutdown: finish the current task
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# --- Elasticsearch as the portal's mirror and generator --------------------------------

ELASTICSEARCH_GENERATOR = "sources.generators.elasticsearch.ElasticsearchGenerator"


@pytest.fixture
def elasticsearch_generator(elasticsearch_url: str) -> dict:
    """The RESOURCESYNC_GENERATORS entry of the Elasticsearch generator on the test node
    (its indices carry this run's prefix, set by resourcesync_portal/test_settings.py)."""
    return {
        "BACKEND": ELASTICSEARCH_GENERATOR,
        "HOSTS": [elasticsearch_url],
        "INDEX_PREFIX": os.environ["ELASTICSEARCH_INDEX_PREFIX"],
    }


@pytest.fixture
def use_elasticsearch(settings, elasticsearch_generator: dict):
    """The Elasticsearch generator, reading and mirroring into fresh test indices; yields it."""
    from sources.generators import get_generator

    settings.RESOURCESYNC_GENERATORS = {"default": elasticsearch_generator}
    generator = get_generator()
    generator.mirror.delete_indices()
    generator.mirror.ensure_indices()
    yield generator
    generator.mirror.delete_indices()


@pytest.fixture(autouse=True)
def published_dir(settings, tmp_path) -> Path:
    """Each test publishes into its own tree, so regeneration always exercises it."""
    settings.RESOURCESYNC_PUBLISHED_DIR = str(tmp_path / "published")
    return tmp_path / "published"


# --- Database connections ----------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's, and then: fail the run when a test left a database connection open
    (one a thread of its own opened and never closed, say). PostgreSQL then refuses to drop
    the test database, which pytest-django only warns of, and only when the garbage
    collector has not closed the connection first.

    This teardown runs before pytest-django's, which drops the database; collecting here
    finds such a connection every time. A connection collected earlier in the run fails
    the test it was collected in (pyproject.toml's filterwarnings).
    """
    yield
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    left_open = [str(w.message) for w in caught if "deleted while still open" in str(w.message)]
    assert not left_open, f"a test left a database connection open: {left_open}"
