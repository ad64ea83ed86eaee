"""Ingestion rows are built by name: the writer's columns come from the row type."""

from __future__ import annotations

from collections import namedtuple
from datetime import UTC, datetime

import pytest
from django.core.exceptions import FieldDoesNotExist

from sources.bulk import BulkWriter
from sources.models import Change, Resource
from sources.services import ChangeRow, ResourceRow

NOW = datetime(2026, 1, 2, tzinfo=UTC)


def resource_row() -> ResourceRow:
    return ResourceRow(
        resource_set=1, uri="http://x/a", location_type="url", location_value="http://x/a",
        length=1, md5="0" * 32, sha256="", mime="text/plain", lastmod=NOW, ln=[], timestamp=NOW,
    )  # fmt: skip


def test_the_columns_are_the_row_types_fields_in_its_order():
    reordered = namedtuple("Reordered", ["uri", "resource_set", "timestamp"])

    writer = BulkWriter(Resource, reordered)

    assert '("uri", "resource_set_id", "timestamp")' in writer.insert_sql


@pytest.mark.parametrize(("model", "row_type"), [(Resource, ResourceRow), (Change, ChangeRow)])
def test_ingestion_row_types_name_model_fields(model, row_type):
    columns = [model._meta.get_field(name).column for name in row_type._fields]

    assert ", ".join(f'"{column}"' for column in columns) in BulkWriter(model, row_type).insert_sql


def test_a_field_that_is_not_the_models_fails_when_the_writer_is_made():
    with pytest.raises(FieldDoesNotExist):
        BulkWriter(Resource, namedtuple("Typo", ["resource_set", "url"]))


def test_a_row_of_another_type_is_refused_before_anything_is_written():
    writer = BulkWriter(Change, ChangeRow)

    with pytest.raises(TypeError, match="expected ChangeRow rows, got ResourceRow"):
        writer.insert([resource_row()])
