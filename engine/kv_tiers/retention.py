"""Retention classes: how long a stored unit may go unused before the sweeper deletes it.

A unit's class is chosen per request (by the API, a request metadata field or the API key, resolved by the
server) and defaults to `chat`. Defaults follow 3FS's expiry classes: `chat` 7 days, `agent` 3 days; more
classes may be added. The clock is injected so that tests can jump days.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

DEFAULT_CLASSES: dict[str, float] = {"chat": 7 * 86400.0, "agent": 3 * 86400.0}
DEFAULT_CLASS = "chat"
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_CLASS_NAME = re.compile(r"[A-Za-z0-9_.-]{1,16}")


def parse_duration(text: str) -> float:
    """Seconds in '90s', '30m', '12h', '7d', '2w' or a plain number of seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", text)
    if not m:
        raise ValueError(f"bad duration {text!r}: use a number with s, m, h, d or w (e.g. 7d)")
    return float(m.group(1)) * _UNITS.get(m.group(2) or "s", 1.0)


def parse_retention(items: Iterable[str]) -> dict[str, float]:
    """`CLASS=DURATION` strings (as `--kv-retention` takes them) -> {class: seconds}."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, duration = item.partition("=")
        if not sep:
            raise ValueError(f"bad retention {item!r}: use CLASS=DURATION, e.g. chat=7d")
        out[check_class_name(name.strip())] = parse_duration(duration)
    return out


def check_class_name(name: str) -> str:
    if not _CLASS_NAME.fullmatch(name):
        raise ValueError(f"bad retention class name {name!r}: 1-16 letters, digits, '_', '.', '-'")
    return name


@dataclass
class RetentionPolicy:
    """TTL per class (seconds since last use) and the clock every tier reads its `now` from."""

    ttl: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_CLASSES))
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        for name, seconds in self.ttl.items():
            check_class_name(name)
            if seconds <= 0:
                raise ValueError(f"retention of class {name!r} must be > 0 seconds")
        if DEFAULT_CLASS not in self.ttl:
            self.ttl = {**self.ttl, DEFAULT_CLASS: DEFAULT_CLASSES[DEFAULT_CLASS]}

    def ttl_of(self, name: str) -> float:
        """TTL of a class; a class this policy does not know (written by another configuration) gets the longest."""
        return self.ttl.get(name, max(self.ttl.values()))

    @property
    def shortest(self) -> float:
        return min(self.ttl.values())

    def expired(self, name: str, last_used: float, now: float) -> bool:
        return now - last_used > self.ttl_of(name)

    def resolve(self, name: str | None) -> str:
        """The class a request asked for, checked against the configured ones (None -> the default)."""
        if name is None:
            return DEFAULT_CLASS
        if name not in self.ttl:
            raise ValueError(f"unknown retention class {name!r}; known: {sorted(self.ttl)}")
        return name
