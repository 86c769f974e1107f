"""`recipe serve`'s KV tier flags reach the engine config; /metrics shows every tier's counters."""

from __future__ import annotations

import argparse

import pytest
from prometheus_client.parser import text_string_to_metric_families
from recipe.engine.config import group_of
from recipe.engine.kv_tiers import TierStats
from recipe.engine.kv_tiers.tiered import LatencyHistogram, TierSnapshot
from recipe.server.backend import BackendStats
from recipe.server.cli_serve import add_parser
from recipe.server.engine_flags import engine_config_from_args
from recipe.server.flag_types import parse_bytes
from recipe.server.metrics import ServerMetrics


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def kv_engine_config(args: argparse.Namespace) -> dict[str, object]:
    """The engine keyword arguments of the KV group (`EngineConfig.kv`) the flags set."""
    return {k: v for k, v in engine_config_from_args(args).items() if group_of(k) == "kv"}


def test_flags_map_to_engine_config_fields() -> None:
    assert kv_engine_config(parse()) == {}
    args = parse("--kv-cache-bytes", str(64 << 20), "--kv-host-bytes", "1GiB", "--kv-dir", "/tmp/kv",
                 "--kv-disk-bytes", "2GB", "--kv-retention", "agent=1d", "--kv-retention", "batch=12h")
    assert args.kv_cache_bytes == 64 << 20
    assert kv_engine_config(args) == {
        "kv_cache_bytes": 64 << 20, "kv_host_bytes": 1 << 30, "kv_dir": "/tmp/kv", "kv_disk_bytes": 2 * 10**9,
        "kv_retention": ["agent=1d", "batch=12h"]}
    from recipe.engine.config import EngineConfig

    cfg = EngineConfig.from_kwargs(**kv_engine_config(args))
    assert cfg.kv.kv_retention == {"chat": 7 * 86400.0, "agent": 86400.0, "batch": 43200.0}


@pytest.mark.parametrize("bad", [("--kv-host-bytes", "lots"), ("--kv-disk-bytes", "0"),
                                 ("--kv-retention", "chat"), ("--kv-retention", "chat=forever")])
def test_bad_flag_values_are_usage_errors(bad: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*bad)
    assert exc.value.code == 2
    assert bad[0] in capsys.readouterr().err


def test_byte_sizes() -> None:
    assert [parse_bytes(x) for x in ("1", "1k", "1KiB", "1.5MiB", "3GB")] == [1, 1000, 1024, 3 << 19, 3 * 10**9]


def test_tier_metrics_are_exposed_per_tier() -> None:
    hist = LatencyHistogram()
    for seconds in (0.002, 0.03, 0.03):
        hist.observe(seconds)
    snap = TierSnapshot((TierStats("host", hits=5, served_tokens=64, misses=2, bytes_read=500, bytes_written=900, used_bytes=900,
                                   capacity_bytes=4096),
                         TierStats("disk", hits=3, misses=1, bytes_read=300, write_drops=4, corruptions=1,
                                   enabled=False)), hist, 8)
    stats = BackendStats(prefix_cache_queries=200, prefix_cache_hits=120, restored_tokens=80, kv_tiers=snap)
    text = ServerMetrics("vllm", "demo", lambda: stats).render().decode()
    s = {(x.name, tuple(sorted(x.labels.items()))): x.value
         for fam in text_string_to_metric_families(text) for x in fam.samples}

    def tier(name: str, t: str) -> float:
        return s[(name, (("model_name", "demo"), ("tier", t)))]

    assert s[("vllm:external_prefix_cache_hits_total", (("model_name", "demo"),))] == 80
    assert s[("vllm:external_prefix_cache_queries_total", (("model_name", "demo"),))] == 160
    assert tier("vllm:kv_tier_hits_total", "host") == 5 and tier("vllm:kv_tier_hits_total", "disk") == 3
    assert tier("vllm:kv_tier_misses_total", "disk") == 1
    assert tier("vllm:kv_tier_served_tokens_total", "host") == 64 and tier("vllm:kv_tier_served_tokens_total", "disk") == 0
    assert tier("vllm:kv_tier_read_bytes_total", "host") == 500
    assert tier("vllm:kv_tier_written_bytes_total", "host") == 900
    assert tier("vllm:kv_tier_write_drops_total", "disk") == 4
    assert tier("vllm:kv_tier_corruptions_total", "disk") == 1
    assert tier("vllm:kv_tier_enabled", "disk") == 0 and tier("vllm:kv_tier_enabled", "host") == 1
    assert tier("vllm:kv_tier_usage_bytes", "host") == 900
    lab = (("model_name", "demo"),)
    assert s[("vllm:kv_restore_latency_seconds_count", lab)] == 3
    assert abs(s[("vllm:kv_restore_latency_seconds_sum", lab)] - 0.062) < 1e-9
    assert s[("vllm:kv_restore_latency_seconds_bucket", (("le", "0.0025"), ("model_name", "demo")))] == 1


def test_no_tier_series_without_tiers() -> None:
    text = ServerMetrics("recipe", "demo", BackendStats).render().decode()
    assert "kv_tier" not in text and "external_prefix_cache" not in text
