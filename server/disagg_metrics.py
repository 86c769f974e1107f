"""Prometheus series of the disaggregation router and its autoscaler (scraped with the rest at /metrics).

`{p}:disagg_workers{role,state}`, `{p}:disagg_prefill_queue_tokens`, `{p}:disagg_decode_kv_usage_perc`,
`{p}:disagg_ttft_p90_seconds`, `{p}:disagg_tpot_p90_seconds` (gauges); `{p}:disagg_handoffs_total`,
`{p}:disagg_handoff_bytes_total`, `{p}:disagg_worker_restarts_total`,
`{p}:autoscaler_decisions_total{from_role,to_role}` (counters); `{p}:autoscaler_decision_time_seconds
{from_role,to_role,reason}`: one series per recent decision (the last 20), its monotonic time as value.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class RouterState(Protocol):
    """What these series read from the disaggregation router."""

    handoff_count: int
    handoff_bytes: int

    @property
    def restarts(self) -> int: ...

    def workers(self) -> list[dict[str, Any]]: ...

    def live_metrics(self) -> Any: ...


class DisaggCollector(Collector):
    def __init__(self, prefix: str, model_name: str, router: RouterState, autoscaler: Any = None) -> None:
        self.prefix, self.model_name, self.router, self.autoscaler = prefix, model_name, router, autoscaler

    def collect(self) -> Iterator[Metric]:
        p, name, r = self.prefix, self.model_name, self.router
        workers = GaugeMetricFamily(f"{p}:disagg_workers", "Worker processes by role and state.",
                                    labels=["model_name", "role", "state"])
        for (role, state), n in sorted(Counter((w["role"], w["state"]) for w in r.workers()).items()):
            workers.add_metric([name, role, state], float(n))
        yield workers
        live = r.live_metrics()
        for metric, doc, value in (
            ("disagg_prefill_queue_tokens", "Prompt tokens queued on prefill workers.", live.prefill_queue_tokens),
            ("disagg_decode_kv_usage_perc", "Highest KV use among decode workers.", live.decode_kv_usage),
            ("disagg_ttft_p90_seconds", "TTFT p90 over the last 30 s.", live.ttft_p90_s),
            ("disagg_tpot_p90_seconds", "Time per output token p90 over the last 30 s.", live.tpot_p90_s),
        ):
            g = GaugeMetricFamily(f"{p}:{metric}", doc, labels=["model_name"])
            g.add_metric([name], float(value))
            yield g
        for metric, doc, value in (
            ("disagg_handoffs", "Prefill-to-decode hand-offs completed.", r.handoff_count),
            ("disagg_handoff_bytes", "KV bytes handed off.", r.handoff_bytes),
            ("disagg_worker_restarts", "Worker processes restarted after they died.", r.restarts),
        ):
            c = CounterMetricFamily(f"{p}:{metric}", doc, labels=["model_name"])
            c.add_metric([name], float(value))
            yield c
        decisions = list(self.autoscaler.decisions) if self.autoscaler is not None else []
        c = CounterMetricFamily(f"{p}:autoscaler_decisions", "Role moves decided by the autoscaler.",
                                labels=["model_name", "from_role", "to_role"])
        for (a, b), n in sorted(Counter((d.from_role, d.to_role) for d in decisions).items()):
            c.add_metric([name, a, b], float(n))
        yield c
        g = GaugeMetricFamily(f"{p}:autoscaler_decision_time_seconds", "Recent autoscaler decisions with their reason.",
                              labels=["model_name", "from_role", "to_role", "reason"])
        for d in decisions[-20:]:
            g.add_metric([name, d.from_role, d.to_role, d.reason], float(d.time))
        yield g
