"""Form fields for people: durations written and shown as "1 day" or "6 hours"."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.dateparse import parse_duration

#: Units from the largest, with the spellings accepted for each.
UNITS = (
    ("day", 86400, ("d", "day", "days")),
    ("hour", 3600, ("h", "hr", "hrs", "hour", "hours")),
    ("minute", 60, ("m", "min", "mins", "minute", "minutes")),
    ("second", 1, ("s", "sec", "secs", "second", "seconds")),
)
_SECONDS = {spelling: seconds for _, seconds, spellings in UNITS for spelling in spellings}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
EXAMPLE = '"1 day", "6 hours", "1 day 12 hours" or "90 minutes"'


def format_duration(value: timedelta) -> str:
    """'1 day', '1 day 6 hours', '30 minutes'; whole seconds, largest units first."""
    left = int(value.total_seconds())
    parts = []
    for name, seconds, _ in UNITS:
        count, left = divmod(left, seconds)
        if count:
            parts.append(f"{count} {name}{'s' if count != 1 else ''}")
    return " ".join(parts) or "0 seconds"


def parse_human_duration(text: str) -> timedelta | None:
    """Read '1 day 6 hours', '90 min', '2h' (or Django's '1 00:00:00'); None if unreadable."""
    text = text.strip().lower().replace(",", " ").replace(" and ", " ")
    parts = _PART.findall(text)
    try:
        if parts and _PART.sub("", text).strip() == "":
            if all(unit in _SECONDS for _, unit in parts):
                return timedelta(seconds=sum(float(n) * _SECONDS[unit] for n, unit in parts))
            return None
        return parse_duration(text)
    except OverflowError:  # past timedelta's 999,999,999 days, in either reading
        return None


class HumanDurationField(forms.DurationField):
    """A DurationField people can read: shown as '1 day', typed as '6 hours'."""

    default_error_messages = {"invalid": f"Enter a duration such as {EXAMPLE}."}

    def prepare_value(self, value: Any) -> Any:
        return format_duration(value) if isinstance(value, timedelta) else value

    def to_python(self, value: object) -> timedelta | None:
        if value in self.empty_values:
            return None
        if isinstance(value, timedelta):
            return value
        parsed = parse_human_duration(str(value))
        if parsed is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return parsed
