from django.apps import AppConfig


class SourcesConfig(AppConfig):
    name = "sources"
    verbose_name = "ResourceSync sources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import services, tasks

        if tasks.queue_indexing not in services.after_ingest_hooks:
            services.after_ingest_hooks.append(tasks.queue_indexing)
