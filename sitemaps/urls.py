from django.urls import path, register_converter

from . import views
from .dumps import views as dump_views
from .open_change_list import open_change_list

app_name = "sitemaps"


class DocumentNumber:
    """A document's number, at most what a database integer holds: SQLite refused to
    bind a larger one (a 500, before any access check), where it names no document."""

    regex = "[0-9]{1,19}"

    def to_python(self, value: str) -> int:
        number = int(value)
        if number >= 2**63:
            raise ValueError(f"no document has the number {value}")
        return number

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(DocumentNumber, "number")

SET = "resourcesync/<slug:provider>/<slug:set_slug>/"

urlpatterns = [
    path(".well-known/resourcesync", views.source_description, name="source-description"),
    path(SET + "capabilitylist.xml", views.capability_list, name="capability-list"),
    path(SET + "resourcelist.xml", views.resource_list, name="resource-list"),
    path(
        SET + "resourcelist-<number:number>.xml",
        views.resource_list_page,
        name="resource-list-page",
    ),
    path(SET + "changelist.xml", views.change_list, name="change-list"),
    path(SET + "changelist-<number:number>.xml", views.change_list_page, name="change-list-page"),
    *(
        route
        for kind, dump, package, manifest in (
            (
                "resourcedump",
                dump_views.resource_dump,
                dump_views.resource_dump_package,
                dump_views.resource_dump_manifest,
            ),
            (
                "changedump",
                dump_views.change_dump,
                dump_views.change_dump_package,
                dump_views.change_dump_manifest,
            ),
        )
        for route in (
            path(f"{SET}{kind}.xml", dump, name=kind),
            path(f"{SET}{kind}-<number:number>.xml", dump, name=f"{kind}-part"),
            path(f"{SET}{kind}-package-<number:number>.zip", package, name=f"{kind}-package"),
            path(f"{SET}{kind}-manifest-<number:number>.xml", manifest, name=f"{kind}-manifest"),
        )
    ),
    path(SET + "changelist-open.xml", open_change_list, name="change-list-open"),
    path(SET + "changelist-archive.xml", views.change_list_archive, name="change-list-archive"),
]
