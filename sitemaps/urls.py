from django.urls import path

from . import views
from .open_change_list import open_change_list

app_name = "sitemaps"

SET = "resourcesync/<slug:provider>/<slug:set_slug>/"

urlpatterns = [
    path(".well-known/resourcesync", views.source_description, name="source-description"),
    path(SET + "capabilitylist.xml", views.capability_list, name="capability-list"),
    path(SET + "resourcelist.xml", views.resource_list, name="resource-list"),
    path(
        SET + "resourcelist-<int:number>.xml",
        views.resource_list_page,
        name="resource-list-page",
    ),
    path(SET + "changelist.xml", views.change_list, name="change-list"),
    path(SET + "changelist-<int:number>.xml", views.change_list_page, name="change-list-page"),
    path(SET + "changelist-open.xml", open_change_list, name="change-list-open"),
    path(SET + "changelist-archive.xml", views.change_list_archive, name="change-list-archive"),
]
