from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class PortalAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin, with the dashboard as the admin's index page."""

    default = False
    default_site = "dashboard.sites.PortalAdminSite"


class DashboardConfig(AppConfig):
    """What staff open: the dashboard, the set page, charts and document views."""

    name = "dashboard"
