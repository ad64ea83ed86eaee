import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "resourcesync_portal.settings")
django_application = get_wsgi_application()

# After Django's setup: it imports models. Public documents come from the published tree
# when it is on (sitemaps/published_files.py); everything else is Django's.
from sitemaps.published_files import PublishedFiles  # noqa: E402

application = PublishedFiles.wrap(django_application)
