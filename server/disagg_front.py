"""`recipe serve --prefill-workers N --decode-workers M [--autoscale] [--ray-address ADDR|auto]`: the server
fronts engine worker processes (or Ray actors across a cluster's nodes) through the disaggregation router
(`recipe.cluster.router.DisaggLLM`) instead of one embedded engine. The protocol layer is unchanged: the
router is an `EngineClient`, as the embedded engine is; only `build_disagg_backend` knows it is a router.

`/health` answers 503 naming the workers that are not ready (a worker restarting after a crash, one being
started); `/metrics` gains the router's series (per-role worker counts, hand-offs, autoscaler decisions).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client.registry import Collector
from recipe.server.engine_backend import EngineBackend

if TYPE_CHECKING:
    from recipe.engine.core import EngineClient


class Stoppable(Protocol):
    """The autoscaler loop, as the backend sees it."""

    def stop(self) -> None: ...


def disagg_requested(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "prefill_workers", None) or getattr(args, "decode_workers", None)
                or getattr(args, "both_workers", 0) or getattr(args, "ray_address", None))


def disagg_config_from_args(args: argparse.Namespace) -> Any:
    """The `DisaggConfig` the flags ask for (`--ray-address` alone: 1 prefill + 1 decode actor)."""
    from recipe.cluster.config import DisaggConfig

    prefill, decode, both = args.prefill_workers or 0, args.decode_workers or 0, args.both_workers or 0
    if args.ray_address and not (prefill or decode or both):
        prefill, decode = 1, 1
    return DisaggConfig(prefill_workers=prefill, decode_workers=decode, both_workers=both,
                        pin_cores=not args.no_pin_cores, handoff_timeout_s=args.handoff_timeout,
                        ray_address=args.ray_address, ray_cpus_per_worker=args.ray_cpus_per_worker,
                        ray_ship_model=not args.no_ray_ship_model)


class DisaggBackend(EngineBackend):
    """`EngineBackend` over the router: /health from its `health_problem` (the workers that are not ready),
    /metrics gains the router's series (`series(prefix, model_name)`), the autoscaler stops before the router."""

    def __init__(self, engine: EngineClient, name: str | None = None, *, series: Callable[[str, str], Collector],
                 autoscaler: Stoppable | None = None) -> None:
        super().__init__(engine, name)
        self._series = series
        self.autoscaler = autoscaler

    def metrics_collector(self, prefix: str, model_name: str) -> Collector:
        return self._series(prefix, model_name)

    async def shutdown(self) -> None:
        if self.autoscaler is not None:
            self.autoscaler.stop()
        await super().shutdown()


def build_disagg_backend(args: argparse.Namespace, engine_config: dict[str, Any], name: str) -> DisaggBackend:
    from recipe.cluster.router import DisaggLLM
    from recipe.server.disagg_metrics import DisaggCollector

    router = DisaggLLM(args.model or "smollm2", disagg_config_from_args(args), **engine_config)
    autoscaler = None
    if args.autoscale:
        from recipe.cluster.autoscaler import AutoscalerLoop

        autoscaler = AutoscalerLoop(router)
        autoscaler.start()
    return DisaggBackend(router, name=name, autoscaler=autoscaler,
                         series=lambda prefix, model: DisaggCollector(prefix, model, router, autoscaler))
