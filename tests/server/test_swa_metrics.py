"""/metrics shows the V4 session cache's counters when it is on, and nothing of it when it is off."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from recipe.engine.session_cache import SessionStats
from recipe.server.backend import BackendStats
from recipe.server.metrics import ServerMetrics


def test_session_cache_metrics() -> None:
    sessions = SessionStats(hits=47, misses=10, replays=10, replay_tokens=1440, restore_seconds=0.25,
                            stored_bytes=9 << 20, bytes_held=3 << 20)
    text = ServerMetrics("vllm", "demo", lambda: BackendStats(swa_sessions=sessions)).render().decode()
    s = {x.name: x.value for fam in text_string_to_metric_families(text) for x in fam.samples
         if x.labels == {"model_name": "demo"}}
    assert s["vllm:swa_session_hits_total"] == 47 and s["vllm:swa_session_misses_total"] == 10
    assert s["vllm:swa_replay_tokens_total"] == 1440 and s["vllm:swa_restore_seconds_total"] == 0.25
    assert s["vllm:swa_session_persisted_bytes_total"] == 9 << 20 and s["vllm:swa_session_bytes"] == 3 << 20


def test_no_session_series_when_off() -> None:
    assert "swa_" not in ServerMetrics("recipe", "demo", BackendStats).render().decode()
