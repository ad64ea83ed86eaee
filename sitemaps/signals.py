"""What regeneration tells the rest of the portal (notifications subscribe in their apps.py).

`documents_changed` is sent after each regeneration run (lists and dumps),
once it let go of its set, with `resource_set_id` and the run's `report`;
receivers must not fail the run (a failing one is logged).
"""

from __future__ import annotations

from django.dispatch import Signal

documents_changed = Signal()
