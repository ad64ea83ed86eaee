"""`harvest --follow`: keep a destination in sync as change notifications arrive.

It subscribes to the set's change-notification topic (through the hub the
Capability List names), then catches up from the Change List (a baseline
first if there is none), then applies each notification as it arrives:
created/updated resources are downloaded and checked against their hashes,
deleted ones removed. A notification that starts after the last one ended
shows a gap (a notification missed, or never sent): the changes in between
are read from the Change List first. The lease is renewed before it ends;
Ctrl-C (or `stop`) unsubscribes.
"""

from __future__ import annotations

import datetime as dt
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from urllib.parse import urlsplit

from harvester.addresses import AddressPolicy
from harvester.changes import Change, latest_changes
from harvester.client import FetchError, HarvestClient, address_policy
from harvester.config import HarvestConfig
from harvester.discovery import discover_capability_lists
from harvester.incremental import incremental_from_list
from harvester.layout import arrange
from harvester.report import NoProgress, Progress, SyncReport
from harvester.session import HarvestSession
from harvester.state import destination_lock
from harvester.sync import current_state, named_set, run_set
from harvester.transfer import delete_resources, download_resources
from harvester.walk import HarvestError, fetch_document
from harvester.websub import CallbackServer, SubscriptionError, ask_hub
from sitemaps.protocol.constants import Capability, ChangeType
from sitemaps.protocol.reader import Document, ResourceSyncParseError, parse_document

ONE_MICROSECOND = dt.timedelta(microseconds=1)
#: Capability values of a change notification (1.0 used `changelist-notification`).
CHANGE_NOTIFICATIONS = frozenset({Capability.CHANGE_NOTIFICATION, "changelist-notification"})
#: Renew the lease once this share of it has passed.
RENEW_AT = 0.8
#: Seconds to wait for the hub to verify a subscribe or unsubscribe.
VERIFY_TIMEOUT = 30.0

Notify = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Channel:
    """The set's change-notification topic and its hub, from the Capability List."""

    topic: str
    hub: str
    change_list: str


@dataclass
class Follower:
    """The running follow: its session, where it is synced to, and what it applied."""

    session: HarvestSession
    channel: Channel
    notify: Notify
    #: The newest change `datetime` applied per resource, so a late, older one is not.
    applied: dict[str, dt.datetime] = field(default_factory=dict)
    notifications: int = 0
    gaps: int = 0

    @property
    def synced_until(self) -> dt.datetime | None:
        return self.session.state.synced_until

    def apply(self, payload: bytes) -> None:
        """Apply one notification; fill a gap before it from the Change List."""
        try:
            document = parse_document(payload, max_bytes=self.session.config.max_document_bytes)
        except ResourceSyncParseError as error:
            self.session.report.warnings.append(f"a notification could not be read: {error}")
            return
        if document.capability not in CHANGE_NOTIFICATIONS or document.from_ is None:
            self.session.report.warnings.append("a notification without capability/from ignored")
            return
        failures = self.session.report.failed
        synced = self.synced_until
        if synced is not None and document.from_ > synced + ONE_MICROSECOND:
            self.fill_gap(synced, document.from_)
        applied = self.apply_entries(document)
        self.notifications += 1
        until = document.until or max(
            (c.entry.datetime for c in applied if c.entry.datetime), default=document.from_
        )
        if self.session.report.failed == failures and (synced is None or until > synced):
            self.session.state.synced_until = self.session.report.sync_point = until
        self.session.checkpoint(force=True)
        self.notify(self.progress_line(document, applied))

    def fill_gap(self, since: dt.datetime, before: dt.datetime) -> None:
        self.gaps += 1
        self.notify(
            f"gap: no notification received for {since.isoformat()} to {before.isoformat()} "
            "(sent before subscribing, or missed); reading the Change List"
        )
        selected = incremental_from_list(self.session, self.channel.change_list, since, before)
        self.remember(selected)

    def apply_entries(self, document: Document) -> list[Change[Document]]:
        assert document.from_ is not None
        changes = [
            Change(entry=entry, origin=document, position=position)
            for position, entry in enumerate(document.entries)
            if not self.already_newer(entry.loc, entry.datetime)
        ]
        until = document.until or dt.datetime.max.replace(tzinfo=dt.UTC)
        selected = latest_changes(changes, document.from_, until)
        download_resources(
            self.session, [c.entry for c in selected if c.kind != ChangeType.DELETED]
        )
        delete_resources(self.session, [c.uri for c in selected if c.kind == ChangeType.DELETED])
        self.remember(selected)
        return selected

    def already_newer(self, uri: str, when: dt.datetime | None) -> bool:
        known = self.applied.get(uri)
        return known is not None and when is not None and when < known

    def remember(self, selected: list[Change[Document]]) -> None:
        for change in selected:
            if change.entry.datetime is not None:
                self.applied[change.uri] = change.entry.datetime
            self.session.state.unsettled.pop(change.uri, None)

    def progress_line(self, document: Document, applied: list[Change[Document]]) -> str:
        kinds = [change.kind for change in applied]
        counts = ", ".join(
            f"{kinds.count(kind)} {kind}" for kind in ChangeType if kinds.count(kind)
        )
        span = f"{_iso(document.from_)} .. {_iso(document.until)}"
        return f"notification {self.notifications} ({span}): {counts or 'nothing new'}"


def _iso(value: dt.datetime | None) -> str:
    return value.isoformat() if value is not None else "open"


def find_channel(session: HarvestSession) -> Channel:
    """The change-notification topic, its hub and the Change List, from the Capability List."""
    url = session.config.require_capability_list_url()
    try:
        document = fetch_document(session, url, Capability.CAPABILITY_LIST)
    except (FetchError, ResourceSyncParseError) as error:
        raise HarvestError(f"cannot read the Capability List: {error}") from error
    by_capability = {entry.capability: entry for entry in document.entries if entry.capability}
    topic = next((by_capability[c] for c in CHANGE_NOTIFICATIONS if c in by_capability), None)
    hub = topic.link("hub") if topic is not None else None
    if topic is None or hub is None:
        raise HarvestError(f"{url} advertises no change-notification topic with a hub")
    change_list = by_capability.get(Capability.CHANGE_LIST)
    if change_list is None:
        raise HarvestError(f"{url} advertises no Change List to catch up from")
    return Channel(topic=topic.loc, hub=hub.href, change_list=change_list.loc)


def hub_token(config: HarvestConfig, hub: str) -> str | None:
    """The token goes to the hub only when it is the source's own (never to a third party)."""
    parts = urlsplit(hub)
    return (
        config.bearer_token
        if f"{parts.scheme}://{parts.netloc}".lower() == config.source_origin
        else None
    )


def hub_policy(config: HarvestConfig, client: HarvestClient, hub: str) -> AddressPolicy:
    """A hub on an allowed host gets the harvest's addresses; any other only public ones.

    The source names its hub: were allowed_networks and the source's own address
    open to it, a hostile Capability List could make us POST to another port of
    the source's host, or to any service in allowed_networks.
    """
    if client.is_allowed(hub):
        return address_policy(config)
    return AddressPolicy(advice="and the hub is outside allowed_hosts: add its origin there")


@contextmanager
def interrupted_by_signals() -> Iterator[None]:
    """Ctrl-C (SIGINT) and a service manager's SIGTERM both end the run cleanly (unsubscribed).

    Explicit, because a process started in the background by a non-interactive
    shell inherits SIGINT as ignored, and Python then never raises KeyboardInterrupt.
    """

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    previous = {
        number: signal.signal(number, interrupt) for number in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run_follow(
    config: HarvestConfig,
    *,
    notify: Notify = print,
    progress: Progress | None = None,
    stop: threading.Event | None = None,
) -> SyncReport:
    """Subscribe, catch up, then apply notifications until Ctrl-C or `stop`; unsubscribe."""
    stop = stop or threading.Event()
    report = SyncReport(mode="follow")
    with CallbackServer(config) as server, HarvestClient(config) as client:
        session = follow_session(config, client, report, progress)
        channel = find_channel(session)
        subscribe = partial(
            ask_hub,
            channel.hub,
            topic=channel.topic,
            server=server,
            lease_seconds=config.lease_seconds,
            token=hub_token(config, channel.hub),
            timeout=VERIFY_TIMEOUT,
            policy=hub_policy(config, client, channel.hub),
        )
        try:
            subscribe("subscribe")
        except SubscriptionError as error:
            raise HarvestError(str(error)) from error
        notify(f"subscribed to {channel.topic} at {channel.hub} (callback {server.url})")
        try:
            catch_up(config, notify, progress)
            with destination_lock(config.destination):
                session.state = current_state(config)
                follower = Follower(session, channel, notify)
                listen(follower, server, stop, lambda: subscribe("subscribe"))
        finally:
            unsubscribe(subscribe, notify, report)
            report.finished = time.monotonic()
            report.warnings += rejected_warning(server.state.rejected)
    return report


def follow_session(
    config: HarvestConfig, client: HarvestClient, report: SyncReport, progress: Progress | None
) -> HarvestSession:
    session = HarvestSession(
        config=config,
        client=client,
        state=current_state(config),
        report=report,
        progress=progress or NoProgress(),
    )
    # A resource may change again before its download: that change's own notification settles it.
    session.defer_changes = True
    return session


def catch_up(config: HarvestConfig, notify: Notify, progress: Progress | None) -> None:
    """A baseline when the destination has none, then the changes since from the Change List."""
    first = run_set(config, None, progress=progress)
    notify(f"caught up: {first.summary()}")
    if first.mode == "baseline":
        notify(f"caught up: {run_set(config, None, progress=progress).summary()}")


def listen(
    follower: Follower, server: CallbackServer, stop: threading.Event, renew: Callable[[], None]
) -> None:
    """Apply notifications as they come; renew the lease on time; stop on Ctrl-C or `stop`."""
    lease = follower.session.config.lease_seconds
    renew_at = time.monotonic() + lease * RENEW_AT
    try:
        while not stop.is_set():
            if time.monotonic() >= renew_at:
                renew()
                follower.notify("lease renewed")
                renew_at = time.monotonic() + lease * RENEW_AT
            try:
                payload = server.state.notifications.get(timeout=0.2)
            except queue.Empty:
                continue
            follower.apply(payload)
    except KeyboardInterrupt:
        follower.notify("interrupted")
    follower.session.report.range_until = follower.synced_until


def unsubscribe(subscribe: Callable[[str], None], notify: Notify, report: SyncReport) -> None:
    try:
        subscribe("unsubscribe")
    except SubscriptionError as error:
        report.warnings.append(f"could not unsubscribe: {error}")
    else:
        notify("unsubscribed")


def rejected_warning(count: int) -> list[str]:
    if not count:
        return []
    return [f"{count} notification(s) ignored: missing or wrong X-Hub-Signature"]


def single_set(config: HarvestConfig) -> HarvestConfig:
    """The config with its one Capability List: following several sets at once is not done."""
    if config.capability_list_url is not None:
        return config
    with HarvestClient(config) as client:
        urls = discover_capability_lists(client, config.source_url)
    if config.set_name is not None:
        return named_set(config, config.set_name, urls, writes=True)
    if len(urls) != 1:
        raise HarvestError(
            f"{config.source_url} leads to {len(urls)} sets; --follow follows one: "
            "name it with `set:`"
        )
    # In the folder the set keeps from when the source listed more (harvester.layout).
    (folder,) = arrange(config.destination, urls, writes=True).values()
    return replace(config, capability_list_url=urls[0], destination=config.destination / folder)
