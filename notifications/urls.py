from django.urls import path, re_path

from . import views

app_name = "notifications"

urlpatterns = [
    path("resourcesync/hub", views.hub_endpoint, name="hub"),
    re_path(
        r"^resourcesync/(?P<provider>[-\w]+)/(?P<set_slug>[-\w]+)/notifications/"
        r"(?P<kind>change|framework)$",
        views.topic,
        name="topic",
    ),
]
