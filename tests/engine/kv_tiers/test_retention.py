from __future__ import annotations

import pytest
from recipe.engine.kv_tiers import RetentionPolicy, parse_duration, parse_retention


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("12h", 43200),
                                               ("7d", 604800), ("2w", 1209600), ("1.5h", 5400)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "7 days", "d", "-1d", "1y"])
def test_bad_durations(bad: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_retention_flags_defaults_and_extra_classes() -> None:
    ttl = parse_retention(["agent=1d", "batch=12h"])
    assert ttl == {"agent": 86400.0, "batch": 43200.0}
    policy = RetentionPolicy({**RetentionPolicy().ttl, **ttl})
    assert policy.ttl_of("chat") == 7 * 86400 and policy.ttl_of("agent") == 86400
    assert policy.ttl_of("from-another-config") == 7 * 86400  # unknown: the longest
    assert policy.resolve(None) == "chat" and policy.resolve("batch") == "batch"
    with pytest.raises(ValueError, match="unknown retention class"):
        policy.resolve("nope")
    with pytest.raises(ValueError, match="CLASS=DURATION"):
        parse_retention(["chat"])
    with pytest.raises(ValueError, match="class name"):
        parse_retention(["a b=1d"])
    with pytest.raises(ValueError, match="> 0"):
        RetentionPolicy({"chat": 0})
