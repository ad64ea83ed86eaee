"""Admin: subscriptions per set with retry and remove actions; notifications and deliveries
read-only (the hub writes them; housekeeping forgets old ones)."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from sources.admin import ReadOnlyAdmin

from . import hub, tasks
from .models import Delivery, Notification, Subscription


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = (
        "callback",
        "resource_set",
        "kind",
        "state",
        "expires_at",
        "last_delivery_at",
        "failures",
        "pending",
    )
    list_filter = ("state", "kind", "resource_set")
    search_fields = ("callback", "resource_set__slug", "resource_set__provider__slug")
    readonly_fields = (
        "resource_set",
        "kind",
        "callback",
        "lease_seconds",
        "expires_at",
        "created_at",
        "renewed_at",
        "last_delivery_at",
        "failures",
        "last_error",
    )
    exclude = ("secret",)
    actions = ["retry", "remove"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # subscribers subscribe through the hub, which verifies them

    def get_queryset(self, request: HttpRequest) -> QuerySet[Subscription]:
        return super().get_queryset(request).select_related("resource_set__provider")

    @admin.display(description="pending deliveries")
    def pending(self, obj: Subscription) -> int:
        return obj.deliveries.filter(status=Delivery.Status.PENDING).count()

    @admin.action(description="Retry: mark active and resend what failed")
    def retry(self, request: HttpRequest, queryset: QuerySet[Subscription]) -> None:
        now = timezone.now()
        queryset.update(state=Subscription.State.ACTIVE, failures=0)
        resent = Delivery.objects.filter(
            subscription__in=queryset,
            status__in=[Delivery.Status.FAILED, Delivery.Status.PENDING],
        ).update(
            status=Delivery.Status.PENDING,
            next_attempt_at=now,
            created_at=now,
            claim="",
            claimed_until=None,
        )
        tasks.run_after_commit(tasks.resend_due_deliveries)
        messages.success(request, f"{resent} deliveries queued again.")

    @admin.action(description="Remove (no verification; pending deliveries are cancelled)")
    def remove(self, request: HttpRequest, queryset: QuerySet[Subscription]) -> None:
        count = hub.end_subscriptions(queryset)
        messages.success(request, f"{count} subscription(s) removed.")


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """The delivery log: every attempt's outcome, newest first. A pending delivery is
    stopped by removing its subscription, never by editing or deleting its row."""

    list_display = (
        "id",
        "notification",
        "callback",
        "status",
        "attempts",
        "last_status",
        "created_at",
        "next_attempt_at",
        "delivered_at",
    )
    list_filter = ("status", "notification__kind", "notification__resource_set")
    search_fields = ("callback",)
    readonly_fields = [field.name for field in Delivery._meta.fields]  # shows created_at too

    def get_queryset(self, request: HttpRequest) -> QuerySet[Delivery]:
        return super().get_queryset(request).select_related("notification__resource_set__provider")


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    """Every payload published; read-only, since deleting one would cancel its deliveries."""

    list_display = ("id", "resource_set", "kind", "entries", "since", "until", "created_at")
    list_filter = ("kind", "resource_set")
    readonly_fields = ("resource_set", "kind", "entries", "since", "until", "created_at", "xml")
    exclude = ("payload",)

    @admin.display(description="payload")
    def xml(self, obj: Notification) -> str:
        return bytes(obj.payload).decode("utf-8", errors="replace")
