"""Admin: providers, sets with their capabilities, tokens; resources and changes read-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from dashboard.forms import HumanDurationField
from dashboard.overview import local_time, published_text
from dashboard.set_page import ResourceSetPage, start_regeneration
from dashboard.status import last_regeneration_text, regeneration_state, running_text
from sitemaps.dumps.build import settings_problem
from sitemaps.dumps.job import readable_size
from sitemaps.dumps.selectors import dump_status
from sitemaps.selectors import annotated, with_regeneration_status

from .generators import BaseGenerator, get_generator
from .models import ApiToken, CapabilitySettings, Change, DataProvider, Resource, ResourceSet

#: What the set page's dump counts mean, and when they matter.
NOT_PACKAGED = (
    "(each file differs from its resource's latest record, or is gone: post the change "
    "that explains it, or restore the file; the dumps lack it until then)"
)
SUPERSEDED = (
    "(later changes replaced or deleted their files before a package took them, as when "
    "the Change Dump is turned on for a set with history; each resource's later change "
    "says what it is now, so this matters only to a destination that wants every version)"
)


def superseded_text(count: int) -> str:
    """The Change Dump's lost earlier versions, apart from the faults: none to mend."""
    if not count:
        return ""
    return format_html("Earlier versions not in the Change Dump: {} {}", count, SUPERSEDED)


def mirror_in_use() -> bool:
    """Whether the generator keeps a copy to index into (Elasticsearch): only then is
    a change's `indexed` news. Such a backend implements `index_pending`; the
    database generator inherits the base class's no-op."""
    return type(get_generator()).index_pending is not BaseGenerator.index_pending


#: A plain input: the admin's URL widget links "Currently:" to the prefix, a folder
#: that answers 404.
URL_PREFIX_FIELD: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
    models.URLField: {"assume_scheme": "https", "widget": forms.URLInput(attrs={"size": 60})}
}


class ResourceSetInline(admin.TabularInline):
    model = ResourceSet
    fields = ("name", "slug", "url_prefix", "protected")
    prepopulated_fields = {"slug": ("name",)}
    formfield_overrides = URL_PREFIX_FIELD
    extra = 0
    show_change_link = True


@admin.register(DataProvider)
class DataProviderAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "contact", "active")
    list_filter = ("active",)
    search_fields = ("name", "slug", "contact")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [ResourceSetInline]


class CapabilitySettingsFormSet(forms.BaseInlineFormSet):
    """Dumps only where the portal can read the set's files (and the Change List is on)."""

    def clean(self) -> None:
        super().clean()
        for form in self.forms:
            cleaned = getattr(form, "cleaned_data", None) or {}
            problem = settings_problem(
                self.instance,  # the set, with the values just entered
                resource_dump=bool(cleaned.get("publish_resource_dump")),
                change_dump=bool(cleaned.get("publish_change_dump")),
                change_list=bool(cleaned.get("publish_change_list")),
            )
            if problem is not None:
                field = (
                    "publish_resource_dump"
                    if cleaned.get("publish_resource_dump")
                    else "publish_change_dump"
                )
                form.add_error(field, f"Dumps cannot be published: {problem}.")


class CapabilitySettingsInline(admin.StackedInline):
    model = CapabilitySettings
    formset = CapabilitySettingsFormSet
    can_delete = False
    min_num = 1
    max_num = 1
    formfield_overrides = {models.DurationField: {"form_class": HumanDurationField}}


@admin.register(ResourceSet)
class ResourceSetAdmin(ResourceSetPage, admin.ModelAdmin):
    change_form_template = "admin/sources/resourceset/change_form.html"  # the set page
    list_display = (
        "__str__",
        "name",
        "protected",
        "pages",
        "dirty",
        "last_regeneration",
        "progress",
    )
    list_filter = ("provider", "protected")
    search_fields = ("slug", "name", "provider__slug")
    readonly_fields = ("changed_at", "accepts_changes_since", "dumps")
    prepopulated_fields = {"slug": ("name",)}
    inlines = [CapabilitySettingsInline]
    formfield_overrides = URL_PREFIX_FIELD
    actions = ["regenerate_now", "regenerate_all_pages"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ResourceSet]:
        """With page counts and pending work annotated: the list page reads, never writes."""
        queryset = super().get_queryset(request).select_related("provider", "regeneration_state")
        return with_regeneration_status(queryset)

    def formfield_for_dbfield(
        self, db_field: models.Field[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> forms.Field | None:
        """The root dir as wide as the URL prefix: the admin's 20em input cut paths off."""
        if db_field.name == "resource_root_dir":
            kwargs["widget"] = forms.TextInput(attrs={"size": 60})
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description="pages")
    def pages(self, obj: ResourceSet) -> str:
        return published_text(obj)

    @admin.display(description="dirty pages")
    def dirty(self, obj: ResourceSet) -> str:
        return f"{annotated(obj, 'dirty_pages')} ({annotated(obj, 'pending')} pending changes)"

    @admin.display(description="last regeneration")
    def last_regeneration(self, obj: ResourceSet) -> str:
        return last_regeneration_text(regeneration_state(obj))

    @admin.display(description="progress")
    def progress(self, obj: ResourceSet) -> str:
        state = regeneration_state(obj)
        if state is None or state.running_since is None:
            return "idle"
        return running_text(state, timezone.now())[1]

    @admin.display(description="dumps")
    def dumps(self, obj: ResourceSet) -> str:
        """Packages and their sizes, the last dump run, and what could not be packaged."""
        if obj.pk is None:
            return "-"
        status = dump_status(obj)
        state = status.state
        last = "never"
        if state is not None and state.built_at is not None:
            last = (
                f"{local_time(state.built_at)}: {state.packages_written} package(s), "
                f"{readable_size(state.bytes_written)} written, {state.skipped} not packaged"
            )
            if state.problem:
                last = f"{local_time(state.built_at)}: not built: {state.problem}"
        packages = format_html_join(
            ", ",
            "{} ({} bitstreams, {} bytes)",
            (
                (p.public_name, p.entries, p.size)
                for p in [*status.resource_packages, *status.change_packages]
                if p.storage_name
            ),
        )
        skipped = format_html_join(
            "",
            "<li>{}: {}: {}</li>",
            ((item["package"], item["uri"], item["reason"]) for item in status.skipped),
        )
        return format_html(
            "Last dump run: {}<br>Packages ({} bytes): {}<br>Not packaged now: {} {}<ul>{}</ul>{}",
            last,
            status.total_bytes,
            packages or "none",
            status.skipped_count,
            NOT_PACKAGED if status.skipped_count else "",
            skipped,
            superseded_text(status.superseded_count),
        )

    def save_related(self, request, form, formsets, change) -> None:
        super().save_related(request, form, formsets, change)
        CapabilitySettings.objects.get_or_create(resource_set=form.instance)

    @admin.action(description="Regenerate now (changed pages)")
    def regenerate_now(self, request: HttpRequest, queryset: QuerySet[ResourceSet]) -> None:
        for resource_set in queryset:
            level, message = start_regeneration(resource_set)
            self.message_user(request, message, level=level)

    @admin.action(description="Regenerate every page")
    def regenerate_all_pages(self, request: HttpRequest, queryset: QuerySet[ResourceSet]) -> None:
        for resource_set in queryset:
            level, message = start_regeneration(resource_set, full=True)
            self.message_user(request, message, level=level)


TOKEN_FIELDS = ("name", "provider", "user", "revoked", "prefix", "created_at", "last_used_at")
NEW_TOKEN_FIELDS = ("name", "provider", "user")


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "name", "provider", "user", "created_at", "last_used_at", "revoked")
    list_filter = ("revoked", "provider")
    fields = TOKEN_FIELDS
    readonly_fields = ("prefix", "created_at", "last_used_at")

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> tuple[str, ...]:
        """A new token is in force: "revoked" is for the tokens already issued."""
        return TOKEN_FIELDS if obj is not None else NEW_TOKEN_FIELDS

    def save_model(self, request, obj: ApiToken, form, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        token, key = ApiToken.issue(provider=obj.provider, user=obj.user, name=obj.name)
        obj.pk = token.pk
        obj.refresh_from_db()
        self.message_user(
            request,
            f"New token (shown once, store it now): {key}",
            level=messages.WARNING,
        )


class ReadOnlyAdmin(admin.ModelAdmin):
    """The snapshot and the log are written by the API only."""

    show_full_result_count = False
    list_per_page = 50

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Resource)
class ResourceAdmin(ReadOnlyAdmin):
    list_display = ("uri", "resource_set", "length", "mime", "lastmod")
    list_filter = ("resource_set", "location_type")
    search_fields = ("uri", "location_value", "md5")
    list_select_related = ("resource_set__provider",)


@admin.register(Change)
class ChangeAdmin(ReadOnlyAdmin):
    list_display = ("datetime", "change", "uri", "resource_set", "indexed")
    list_filter = (
        "change",
        "resource_set",
        "indexed",
        ("datetime", admin.DateFieldListFilter),
        ("timestamp", admin.DateFieldListFilter),
    )
    search_fields = ("uri", "location_value", "event_id")
    date_hierarchy = "datetime"
    ordering = ("-id",)
    list_select_related = ("resource_set__provider",)

    def get_list_display(self, request: HttpRequest) -> Any:
        """Without Elasticsearch, nothing is ever "indexed": no column saying so."""
        shown = super().get_list_display(request)
        return shown if mirror_in_use() else tuple(f for f in shown if f != "indexed")

    def get_list_filter(self, request: HttpRequest) -> Any:
        shown = super().get_list_filter(request)
        return shown if mirror_in_use() else tuple(f for f in shown if f != "indexed")
