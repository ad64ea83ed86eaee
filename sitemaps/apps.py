from django.apps import AppConfig


class SitemapsConfig(AppConfig):
    name = "sitemaps"
    label = "rs_sitemaps"
    verbose_name = "ResourceSync documents"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from sources import services

        from . import signals, tasks  # noqa: F401 (signals: connects the receivers)

        if tasks.after_ingest not in services.after_ingest_hooks:
            services.after_ingest_hooks.append(tasks.after_ingest)
