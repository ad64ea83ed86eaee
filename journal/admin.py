"""The journal in the admin: every run, filtered by set, kind, outcome and day; read-only.

Runs whose process is gone are marked failed before the list or a run is shown.
"""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from .liveness import close_abandoned_runs
from .models import Outcome, Run, run_counts


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = (
        "started_at",
        "kind",
        "target",
        "outcome_badge",
        "took",
        "written",
    )
    list_filter = ("kind", "outcome", "resource_set", ("started_at", admin.DateFieldListFilter))
    search_fields = ("target", "error")
    date_hierarchy = "started_at"
    list_select_related = ("resource_set__provider",)
    show_full_result_count = False
    list_per_page = 50
    fields = (
        "kind",
        "resource_set",
        "target",
        "outcome",
        "started_at",
        "finished_at",
        "took",
        "events",
        "resources",
        "pages",
        "packages",
        "bytes",
        "error",
        "process",
        "heartbeat_at",
        "reported",
    )
    readonly_fields = fields

    def changelist_view(self, request: HttpRequest, extra_context=None):
        close_abandoned_runs()
        return super().changelist_view(request, extra_context)

    def change_view(self, request: HttpRequest, object_id, form_url="", extra_context=None):
        close_abandoned_runs()
        return super().change_view(request, object_id, form_url, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    @admin.display(description="outcome", ordering="outcome")
    def outcome_badge(self, run: Run) -> str:
        return format_html('<span class="run-{}">{}</span>', run.outcome, run.outcome)

    @admin.display(description="duration")
    def took(self, run: Run) -> str:
        if run.duration is None:
            return "still running" if run.outcome == Outcome.RUNNING else "-"
        return f"{run.duration.total_seconds():.2f} s"

    @admin.display(description="counts")
    def written(self, run: Run) -> str:
        return run_counts(run)

    @admin.display(description="process")
    def process(self, run: Run) -> str:
        return f"pid {run.pid} on {run.host}" if run.pid is not None else "-"

    @admin.display(description="reported")
    def reported(self, run: Run) -> str:
        if not run.detail:
            return "-"
        return format_html("<pre>{}</pre>", json.dumps(run.detail, indent=2, sort_keys=True))
