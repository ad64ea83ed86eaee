from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    verbose_name = "ResourceSync sources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import receivers
        from .signals import events_ingested, indexing_turned_away

        events_ingested.connect(
            receivers.index_ingested_changes, dispatch_uid="sources.index_ingested_changes"
        )
        indexing_turned_away.connect(
            receivers.follow_up_turned_away_run, dispatch_uid="sources.follow_up_turned_away_run"
        )
