from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "ResourceSync notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from sitemaps.receivers import PUBLISHING_MODELS
        from sitemaps.signals import documents_changed
        from sources.signals import events_ingested

        from . import receivers

        events_ingested.connect(
            receivers.notify_ingested_changes, dispatch_uid="notifications.ingested"
        )
        documents_changed.connect(
            receivers.announce_regenerated_documents, dispatch_uid="notifications.documents"
        )
        for model in PUBLISHING_MODELS:
            for signal in (post_save, post_delete):
                signal.connect(
                    receivers.announce_after_edit,
                    sender=model,
                    dispatch_uid=f"notifications.announce_after_edit.{model.__name__}",
                )
