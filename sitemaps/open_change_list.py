"""`changelist-open.xml`: the set's open Change List under a URL that never changes.

A client that reads no Change List Index (resync 2.0.1) can always pass this
URL as its Change List. It is the page view with another lookup, so access
(401/403 before 404), 304, HEAD and gzip behave as for `changelist-<n>.xml`.
"""

from __future__ import annotations

from .models import ChangeListPage, StoredDocument
from .protocol.constants import Capability
from .views import StoredDocumentView


class OpenChangeListView(StoredDocumentView):
    model = ChangeListPage
    kind = Capability.CHANGE_LIST

    def find_document(self) -> StoredDocument | None:
        """The set's list without `until`: closing a list opens the next, so there is one."""
        return self.find({"until": None}, latest=True)


open_change_list = OpenChangeListView.as_view()
