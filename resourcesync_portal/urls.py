from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from sitemaps.robots import robots_txt

from . import views

urlpatterns = [
    # The ResourceSync documents first: they are the hot path, and no other route
    # shares their prefixes (`resourcesync/<provider>/<set>/`, `.well-known/`).
    path("", include("sitemaps.urls")),
    path("", views.landing, name="landing"),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("robots.txt", robots_txt, name="robots-txt"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("sources.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI alone: ReDoc's bundle fetches Redocly's logo from its CDN, whatever the options.
    path("api/docs/", views.ApiDocs.as_view(url_name="schema"), name="api-docs"),
    path("", include("notifications.urls")),
    path("", include("sources.urls")),
]
