from django.urls import path

from . import views

app_name = "api"

urlpatterns = [
    path("", views.ApiRootApi.as_view(), name="root"),
    path("sets/", views.ResourceSetListApi.as_view(), name="sets"),
    path(
        "sets/<slug:provider_slug>/<slug:set_slug>/events",
        views.EventIngestApi.as_view(),
        name="events",
    ),
    path(
        "sets/<slug:provider_slug>/<slug:set_slug>/resources",
        views.ResourceDetailApi.as_view(),
        name="resource",
    ),
    path(
        "sets/<slug:provider_slug>/<slug:set_slug>/changes",
        views.ChangeLogApi.as_view(),
        name="changes",
    ),
]
