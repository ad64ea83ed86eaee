from django.urls import path

from . import views

app_name = "sources"

urlpatterns = [
    path(
        "files/<slug:provider>/<slug:set_slug>/<path:path>",
        views.resource_file,
        name="resource-file",
    ),
]
