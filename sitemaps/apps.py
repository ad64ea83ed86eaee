from django.apps import AppConfig


class SitemapsConfig(AppConfig):
    name = "sitemaps"
    label = "rs_sitemaps"
    verbose_name = "ResourceSync documents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save, pre_save

        from sources.models import CapabilitySettings, ResourceSet
        from sources.signals import changes_indexed, copy_repaired, events_ingested

        from . import receivers

        events_ingested.connect(
            receivers.regenerate_after_ingest, dispatch_uid="sitemaps.regenerate_after_ingest"
        )
        changes_indexed.connect(
            receivers.regenerate_after_ingest, dispatch_uid="sitemaps.regenerate_after_indexing"
        )
        copy_repaired.connect(
            receivers.regenerate_after_repair, dispatch_uid="sitemaps.regenerate_after_repair"
        )
        for model in receivers.PUBLISHING_MODELS:
            for signal in (post_save, post_delete):
                signal.connect(
                    receivers.rebuild_published_tree,
                    sender=model,
                    dispatch_uid=f"sitemaps.rebuild_published_tree.{model.__name__}",
                )
        post_save.connect(
            receivers.write_documents_of_new_set,
            sender=ResourceSet,
            dispatch_uid="sitemaps.write_documents_of_new_set",
        )
        pre_save.connect(
            receivers.remember_locations,
            sender=ResourceSet,
            dispatch_uid="sitemaps.remember_locations",
        )
        post_save.connect(
            receivers.follow_changed_locations,
            sender=ResourceSet,
            dispatch_uid="sitemaps.follow_changed_locations",
        )
        post_save.connect(
            receivers.write_documents_turned_on,
            sender=CapabilitySettings,
            dispatch_uid="sitemaps.write_documents_turned_on",
        )
