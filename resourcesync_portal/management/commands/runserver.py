"""`runserver`, which with no broker also runs the beat schedule (`embedded_beat`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.staticfiles.management.commands.runserver import Command as BaseCommand

from resourcesync_portal import embedded_beat


class Command(BaseCommand):
    help = (
        "Starts the development server; with no CELERY_BROKER_URL it also runs the beat "
        "schedule (runs of due sets, rotations, redeliveries) in a thread."
    )

    def inner_run(self, *args: Any, **options: Any) -> None:
        """In the process that serves (the autoreloader's child), before it serves."""
        if settings.CELERY_TASK_ALWAYS_EAGER:
            embedded_beat.start(settings.CELERY_BEAT_SCHEDULE)
        super().inner_run(*args, **options)
