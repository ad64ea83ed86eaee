"""The table of the database cache (settings.CACHES without CACHE_URL).

Created by `migrate`, so no deployment step can be forgotten; it exists
whichever cache is configured, so switching CACHE_URL off needs no command.
"""

from django.core.management import call_command
from django.db import migrations

CACHE_TABLE = "portal_cache"


def create_cache_table(apps, schema_editor):
    call_command(
        "createcachetable", CACHE_TABLE, database=schema_editor.connection.alias, verbosity=0
    )


def drop_cache_table(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(CACHE_TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("sources", "0001_initial")]

    operations = [migrations.RunPython(create_cache_table, drop_cache_table, elidable=False)]
