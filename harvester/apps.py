from django.apps import AppConfig


class HarvesterConfig(AppConfig):
    """The destination side: harvests a ResourceSync source into a local folder."""

    name = "harvester"
    verbose_name = "ResourceSync harvester"
    default_auto_field = "django.db.models.BigAutoField"
