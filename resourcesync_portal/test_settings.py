"""Test overrides of the base settings; nothing else differs."""

import os

os.environ.setdefault("ELASTICSEARCH_INDEX_PREFIX", f"test-{os.getpid()}")

from .settings import *  # noqa: F403

# The tests switch to the Elasticsearch generator per test (tests/conftest.py): its app
# is always loaded, as it is in production whenever ELASTICSEARCH_URL is set.
if "django_elasticsearch_dsl" not in INSTALLED_APPS:  # noqa: F405
    INSTALLED_APPS.insert(INSTALLED_APPS.index("sources"), "django_elasticsearch_dsl")  # noqa: F405
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
STORAGES["resourcesync"]["OPTIONS"] = {"location": str(DATA_DIR / "test-documents")}  # noqa: F405
# Each test gets its own published tree (tests/conftest.py); none by default.
RESOURCESYNC_PUBLISHED_DIR = ""
# The tests' subscribers listen on loopback, which the hub refuses by default.
RESOURCESYNC_NOTIFICATIONS = {
    **RESOURCESYNC_NOTIFICATIONS,  # noqa: F405
    "ALLOWED_CALLBACK_NETWORKS": ["127.0.0.0/8"],
}
