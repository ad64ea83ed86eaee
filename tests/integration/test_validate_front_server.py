"""`validate_source` through nginx (deploy/nginx.conf), as production serves the documents.

nginx sends public lists itself, with its own ETag, Last-Modified, 304 and
the pre-compressed gzip twins; everything else passes through to Django.
"""

from __future__ import annotations

import pytest

from validator import validate_source

from .test_front_server import front, storage  # noqa: F401 (fixtures)
from .test_validate_source import fill, portal_set

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_portal_behind_nginx_has_no_problem(front: str, settings) -> None:  # noqa: F811
    settings.PUBLIC_BASE_URL = front
    fill(portal_set(front, "articles"))

    report = validate_source(f"{front}/.well-known/resourcesync")

    assert report.problems == []
    assert len(report.documents) == 14  # as the set's 13 in test_validate_source, and the root
