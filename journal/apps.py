from django.apps import AppConfig


class JournalConfig(AppConfig):
    """A record of every run (regeneration, scan, export, dump, harvest)."""

    name = "journal"
    default_auto_field = "django.db.models.BigAutoField"
