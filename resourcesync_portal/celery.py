"""The Celery app: eager (in-process) when no broker is configured."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resourcesync_portal.settings")

app = Celery("resourcesync_portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
