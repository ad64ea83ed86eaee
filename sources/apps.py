from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    verbose_name = "ResourceSync sources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import receivers
        from .signals import events_ingested

        events_ingested.connect(
            receivers.index_ingested_changes, dispatch_uid="sources.index_ingested_changes"
        )
