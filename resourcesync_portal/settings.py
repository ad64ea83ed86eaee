"""Settings, read from the environment.

With nothing set, the portal runs embedded: SQLite, the database generator
and eager Celery. Production sets DATABASE_URL, ELASTICSEARCH_URL,
CELERY_BROKER_URL, SECRET_KEY, ALLOWED_HOSTS and PUBLIC_BASE_URL.
"""

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from resourcesync_portal.environment import (
    env_base_url,
    env_bool,
    env_choice,
    env_int,
    env_json_object,
    env_list,
    env_log_level,
    env_networks,
    env_rate,
    env_seconds,
    env_set_paths,
    env_url,
)
from sitemaps.protocol.constants import MAX_DOCUMENT_BYTES

BASE_DIR = Path(__file__).resolve().parent.parent
_DAY = 24 * 3600
_YEAR = 365 * _DAY


SECRET_KEY = os.environ.get("SECRET_KEY", "")
DEBUG = env_bool("DEBUG", default=not SECRET_KEY)
if not SECRET_KEY:
    if not DEBUG:
        # The development key is public: sessions and admin logins could be forged.
        raise ImproperlyConfigured(
            "SECRET_KEY is not set and DEBUG is off. Set SECRET_KEY to a long random value "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(50))'), "
            "or set DEBUG=1 for development."
        )
    SECRET_KEY = "insecure-development-key-set-SECRET_KEY-in-production"  # noqa: S105 (public)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")

# Every URL in every ResourceSync document is absolute, built from this base.
PUBLIC_BASE_URL = env_base_url("PUBLIC_BASE_URL", "http://127.0.0.1:8000")

INSTALLED_APPS = [
    # The admin with the dashboard as its index (dashboard/sites.py).
    "dashboard.apps.PortalAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # Before staticfiles: its `runserver` also runs the beat schedule with no broker.
    "resourcesync_portal",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    # "django_elasticsearch_dsl" follows, with the Elasticsearch generator only.
    "sources",
    "sitemaps",
    "notifications",
    "harvester",
    "journal",
    "dashboard",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files (admin, API docs) straight from gunicorn, no extra server.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Logs once per host when requests come in on a host PUBLIC_BASE_URL does not name.
    "resourcesync_portal.hosts.PublicHostMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Django's, building its storage only when a page adds or reads a message.
    "resourcesync_portal.lazy_messages.LazyMessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A view's database down or busy: 503 with Retry-After, not Django's 500.
    "resourcesync_portal.database_errors.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "resourcesync_portal.urls"
WSGI_APPLICATION = "resourcesync_portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATA_DIR = Path(os.environ.get("DATA_DIR", BASE_DIR / "var"))
DATA_DIR.mkdir(parents=True, exist_ok=True)

DATABASES = {
    "default": dj_database_url.config(
        default=f"sqlite:///{DATA_DIR / 'db.sqlite3'}",
        # Kept open between requests: opening one (and its PRAGMAs) cost more
        # than serving a stored document.
        conn_max_age=env_int("CONN_MAX_AGE", 60, minimum=0, maximum=_DAY),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web server read while ingestion writes.
    DATABASES["default"].setdefault("OPTIONS", {})["init_command"] = (
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
    )
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # psycopg prepares a statement run this many times on a connection; Django turns
    # that off (None), and its own cursors never prepare (they bind on the client).
    # The document lookup binds on the server (sitemaps/document_lookup.py), so it is
    # planned once per kept connection. `off` for a pooler that keeps no prepared
    # statements (PgBouncer in transaction mode before 1.21).
    _threshold = os.environ.get("DATABASE_PREPARE_THRESHOLD", "5").strip().lower()
    if _threshold != "off" and not _threshold.isdigit():
        raise ImproperlyConfigured(
            f"DATABASE_PREPARE_THRESHOLD must be a number of uses or 'off', not {_threshold!r}."
        )
    DATABASES["default"].setdefault("OPTIONS", {})["prepare_threshold"] = (
        None if _threshold == "off" else int(_threshold)
    )
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# One cache shared by every process, so API rate limits count across gunicorn
# workers and web nodes: Redis when CACHE_URL is set, else a database table
# (`migrate` creates it: sources/migrations/0002_cache_table.py).
CACHE_URL = os.environ.get("CACHE_URL", "")
if CACHE_URL and not CACHE_URL.startswith(("redis://", "rediss://", "unix://")):
    raise ImproperlyConfigured(f"CACHE_URL must be a redis:// URL, not {CACHE_URL!r}.")
CACHES: dict[str, dict[str, object]] = {
    "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    if CACHE_URL
    else {
        "BACKEND": "django.core.cache.backends.db.DatabaseCache",
        "LOCATION": "portal_cache",
        "OPTIONS": {"MAX_ENTRIES": 10000},
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Times to the second everywhere (the admin's lists too): resourcesync_portal/formats/.
FORMAT_MODULE_PATH = ["resourcesync_portal.formats"]

STATIC_URL = "static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
MEDIA_ROOT = Path(os.environ.get("MEDIA_ROOT", DATA_DIR / "media"))

# ResourceSync documents are written through Django's storage API, so an
# S3-compatible backend can replace local files on multi-node deployments.
LOCAL_STORAGE = "django.core.files.storage.FileSystemStorage"
STORAGES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": LOCAL_STORAGE},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"}
    if not DEBUG
    else {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "resourcesync": {
        "BACKEND": os.environ.get("RESOURCESYNC_STORAGE_BACKEND", LOCAL_STORAGE),
        # e.g. {"bucket_name": "docs", "endpoint_url": "https://s3.example.org"} for
        # storages.backends.s3.S3Storage (credentials from AWS_* variables).
        "OPTIONS": env_json_object("RESOURCESYNC_STORAGE_OPTIONS")
        or (
            {"location": str(DATA_DIR / "documents")}
            if "RESOURCESYNC_STORAGE_BACKEND" not in os.environ
            else {}
        ),
    },
}

# Load balancers probe /healthz over plain HTTP, also when HTTPS is enforced.
SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
# Production hardening; `manage.py check --deploy` passes with SECRET_KEY set.
if not DEBUG:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000, minimum=0, maximum=2 * _YEAR)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
    SECURE_CONTENT_TYPE_NOSNIFF = True

# --- Generators (pluggable, like Wagtail's search backends) ----------------
# One entry picks the backend documents are built from, with its own options.
# ELASTICSEARCH_URL picks the Elasticsearch generator, which also keeps the
# mirror (indices `<ELASTICSEARCH_INDEX_PREFIX>-resources` and `-changes`).
_elasticsearch_url = os.environ.get("ELASTICSEARCH_URL", "")
_generator: dict[str, Any] = (
    {
        "BACKEND": "sources.generators.elasticsearch.ElasticsearchGenerator",
        "HOSTS": [_elasticsearch_url],
        "INDEX_PREFIX": os.environ.get("ELASTICSEARCH_INDEX_PREFIX", "resourcesync"),
        "TIMEOUT": 30,
    }
    if _elasticsearch_url
    else {"BACKEND": "sources.generators.database.DatabaseGenerator"}
)
RESOURCESYNC_GENERATORS = {"default": _generator}
if _elasticsearch_url:
    # Its app imports the Elasticsearch client and every Document when it loads: a
    # third of a second of CPU in every process (`manage.py harvest` too), for
    # nothing when the database generator builds the documents.
    INSTALLED_APPS.insert(INSTALLED_APPS.index("sources"), "django_elasticsearch_dsl")

# django-elasticsearch-dsl (its Documents and `search_index` command) talks to
# the same node as the generator.
ELASTICSEARCH_DSL = {
    "default": {
        "hosts": _generator.get("HOSTS", ["http://127.0.0.1:9200"]),
        "request_timeout": _generator.get("TIMEOUT", 30),
        **_generator.get("OPTIONS", {}),
    },
}
# We index ourselves, after commit (see sources.indexing); never from signals.
ELASTICSEARCH_DSL_AUTOSYNC = False
ELASTICSEARCH_DSL_AUTO_REFRESH = False
ELASTICSEARCH_DSL_SIGNAL_PROCESSOR = "django_elasticsearch_dsl.signals.BaseSignalProcessor"

# --- ResourceSync documents --------------------------------------------------
# https://www.sitemaps.org/protocol.html#index: 50,000 URLs and 50 MB per file.
# At least 8 MiB: the largest entry an event can make (1 MiB of JSON, each `&`
# written as `&amp;`) must fit in a page, or its set could not publish.
_MIN_DOCUMENT_BYTES = 8 * 1024 * 1024
RESOURCESYNC_MAX_DOCUMENT_BYTES = env_int(
    "RESOURCESYNC_MAX_DOCUMENT_BYTES",
    MAX_DOCUMENT_BYTES,
    minimum=_MIN_DOCUMENT_BYTES,
    maximum=MAX_DOCUMENT_BYTES,
)
# A superseded document version stays readable this long (a reader may have
# found its name just before the swap); then cleanup deletes it, with any file a
# killed run left (sitemaps/cleanup.py).
RESOURCESYNC_SUPERSEDED_GRACE_SECONDS = env_int(
    "RESOURCESYNC_SUPERSEDED_GRACE_SECONDS", 300, minimum=0, maximum=30 * _DAY
)
# A regeneration run beats every sixth of this; a run silent for this long is
# presumed dead (killed, out of memory) and the next run takes its set over.
RESOURCESYNC_REGENERATION_LEASE_SECONDS = env_seconds(
    "RESOURCESYNC_REGENERATION_LEASE_SECONDS", 60, minimum=1, maximum=_DAY
)
# Public documents are also linked, under their URL paths, in this folder for a
# front web server to send without Python (sitemaps/publishing.py and
# deploy/nginx.conf). Only with local storage; empty turns it off.
RESOURCESYNC_PUBLISHED_DIR = os.environ.get(
    "RESOURCESYNC_PUBLISHED_DIR",
    str(DATA_DIR / "published") if STORAGES["resourcesync"]["BACKEND"] == LOCAL_STORAGE else "",
)

# The journal of runs (journal/) keeps this many days; 0 keeps every run.
RESOURCESYNC_JOURNAL_RETENTION_DAYS = env_int(
    "RESOURCESYNC_JOURNAL_RETENTION_DAYS", 90, minimum=0, maximum=100 * 365
)
# A running run with no sign of life for this long (its process killed on
# another host, say) is marked failed: "process ended without recording an
# outcome". A run beats every tenth of it; one whose process is gone from this
# host is marked at once (journal/liveness.py).
RESOURCESYNC_JOURNAL_SILENCE_SECONDS = env_seconds(
    "RESOURCESYNC_JOURNAL_SILENCE_SECONDS", 600, minimum=1, maximum=_DAY
)

# Dump packages (ZIP) close at this many bytes (a larger single resource gets a
# package of its own) and at the set's entries per document (at most 50,000
# bitstreams). "stored" writes bitstreams as they are (fastest to build, copy
# and serve); "deflated" compresses them.
RESOURCESYNC_DUMP_PACKAGE_BYTES = env_int(
    "RESOURCESYNC_DUMP_PACKAGE_BYTES", 100 * 1024 * 1024, minimum=1, maximum=2**62
)
RESOURCESYNC_DUMP_COMPRESSION = env_choice(
    "RESOURCESYNC_DUMP_COMPRESSION", "stored", ("stored", "deflated")
)

# The portal serves the files under each set's resource_root_dir at
# /files/<provider>/<set>/<path> (the demo uses it); off when a web server does.
SERVE_RESOURCE_FILES = env_bool("SERVE_RESOURCE_FILES", True)

# --- Change and framework notifications (WebSub) ------------------------------
# Keys and defaults: notifications/conf.py. Without RESOURCESYNC_HUB_URL the
# embedded hub at /resourcesync/hub serves the subscribers.
RESOURCESYNC_NOTIFICATIONS = {
    "HUB_URL": env_url("RESOURCESYNC_HUB_URL"),
    # e.g. "10.0.0.0/8" for subscribers on a private network; none by default (SSRF).
    "ALLOWED_CALLBACK_NETWORKS": env_networks("RESOURCESYNC_ALLOWED_CALLBACK_NETWORKS"),
}
# Sets whose resource_root_dir beat rescans (`manage.py scan`), as provider/set, comma-separated.
RESOURCESYNC_SCAN_SETS = env_set_paths("RESOURCESYNC_SCAN_SETS")

# --- Ingestion API -----------------------------------------------------------
# A request is one transaction: the limit keeps one inside gunicorn's timeout
# (README, Production) and bounds the memory its validated events take.
INGEST_MAX_BODY_BYTES = env_int(
    "INGEST_MAX_BODY_BYTES", 16 * 1024 * 1024, minimum=1024, maximum=2**40
)
# How far ahead of this server's clock an event's `datetime` may be.
INGEST_CLOCK_SKEW_SECONDS = env_int("INGEST_CLOCK_SKEW_SECONDS", 300, minimum=0, maximum=7 * _DAY)
# Rows per INSERT/UPDATE statement while a request is applied.
INGEST_BATCH_SIZE = env_int("INGEST_BATCH_SIZE", 2000, minimum=1, maximum=100_000)

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "sources.api.exceptions.api_exception_handler",
    "DEFAULT_THROTTLE_RATES": {
        "provider": env_rate("API_THROTTLE_RATE", "100000/hour"),
    },
}
SPECTACULAR_SETTINGS = {
    # Swagger UI's assets come from the sidecar package, not a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Only the ways clients authenticate (a token, two headers), not the admin's
    # session behind the browsable API, and not the schema endpoint itself.
    "AUTHENTICATION_WHITELIST": ["sources.api.authentication.ApiTokenAuthentication"],
    "SERVE_INCLUDE_SCHEMA": False,
    "TITLE": "ResourceSync portal API",
    "DESCRIPTION": "Ingestion of resource events from the harvester (DIT).",
    "VERSION": "1.0.0",
}

# --- Celery ------------------------------------------------------------------
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "")
CELERY_TASK_ALWAYS_EAGER = not CELERY_BROKER_URL
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND", "") or None
CELERY_BEAT_SCHEDULE = {
    "reconcile-indices": {
        "task": "sources.tasks.reconcile_indices",
        "schedule": timedelta(minutes=10),
    },
    "regenerate-due-sets": {
        "task": "sitemaps.tasks.regenerate_due_sets",
        "schedule": timedelta(seconds=30),
    },
    "cleanup-documents": {
        "task": "sitemaps.tasks.cleanup_documents",
        "schedule": timedelta(minutes=5),
    },
    "resend-due-deliveries": {
        "task": "notifications.tasks.resend_due_deliveries",
        "schedule": timedelta(seconds=30),
    },
    "expire-subscriptions": {
        "task": "notifications.tasks.expire_subscriptions",
        "schedule": timedelta(minutes=10),
    },
    "prune-journal": {
        "task": "journal.tasks.prune_journal",
        "schedule": timedelta(hours=6),
    },
    "scan-folders": {
        "task": "sources.tasks.scan_folders",
        "schedule": timedelta(
            seconds=env_int("RESOURCESYNC_SCAN_SECONDS", 300, minimum=10, maximum=_DAY)
        ),
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_log_level("LOG_LEVEL", "INFO")},
    "loggers": {
        # Through the root's handler only: Django's own console handler (DEBUG only)
        # wrote every line of `make run` twice.
        "django": {"handlers": []},
        # httpx logs every request at INFO; the harvester reports its own progress.
        "httpx": {"level": "WARNING"},
        "elastic_transport": {"level": "WARNING"},
    },
}
