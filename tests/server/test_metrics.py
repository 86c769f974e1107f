"""Prometheus exposition: the vLLM-style names exist, and request timing feeds them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from recipe.server.app import create_app
from recipe.server.backend import BackendStats, EchoBackend
from recipe.server.config import ServerConfig
from recipe.server.metrics import RequestTimer, ServerMetrics
from starlette.testclient import TestClient


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_names_and_backend_gauges() -> None:
    stats = BackendStats(running=3, waiting=2, kv_usage=0.25, kv_blocks_used=7, prefix_cache_queries=100, prefix_cache_hits=40)
    m = ServerMetrics("vllm", "demo", lambda: stats)
    s = samples(m.render().decode())
    lab = (("model_name", "demo"),)
    assert s[("vllm:num_requests_running", lab)] == 3
    assert s[("vllm:num_requests_waiting", lab)] == 2
    assert s[("vllm:kv_cache_usage_perc", lab)] == 0.25
    assert s[("vllm:kv_cache_blocks_used", lab)] == 7
    assert s[("vllm:prefix_cache_queries_total", lab)] == 100
    assert s[("vllm:prefix_cache_hits_total", lab)] == 40
    for name in ("vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
        assert (name, lab) in s, name


def test_request_timer_counts_tokens_and_requests() -> None:
    m = ServerMetrics("recipe", "demo", BackendStats)
    for _ in range(2):
        t = RequestTimer(m)
        t.tokens_arrived(1, queue_time_s=0.01)
        t.tokens_arrived(3)
        t.tokens_arrived(0)
        t.finished("length", prompt_tokens=7)
    s = samples(m.render().decode())
    lab = (("model_name", "demo"),)
    assert s[("recipe:time_to_first_token_seconds_count", lab)] == 2
    assert s[("recipe:inter_token_latency_seconds_count", lab)] == 6  # 3 gaps after the first token, twice
    assert s[("recipe:e2e_request_latency_seconds_count", lab)] == 2
    assert s[("recipe:request_queue_time_seconds_count", lab)] == 2
    assert s[("recipe:generation_tokens_total", lab)] == 8
    assert s[("recipe:prompt_tokens_total", lab)] == 14
    assert s[("recipe:request_success_total", (("finished_reason", "length"), ("model_name", "demo")))] == 2


def test_metrics_route_serves_prometheus_text() -> None:
    c = TestClient(create_app(ServerConfig(metrics_prefix="recipe"), EchoBackend()))
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    assert ("recipe:num_requests_running", (("model_name", "echo"),)) in samples(r.text)
