"""Disaggregated prefill and decode: engine roles in their own processes, the KV hand-off between them,
the router that fronts them, and the autoscaler that moves workers between roles.

- `messages.py`: what the router and the workers say to each other (pickled over a pipe or through Ray);
- `transport.py`: where hand-off KV bytes travel (a shared-memory segment per hand-off on one machine);
- `ray_transport.py`: the same through the Ray object store, between nodes;
- `worker.py`: one engine process and its role (`prefill`, `decode`, `both`), pinned to its own cores; the
  engine's end of the hand-off is its KV connector (`engine/kv_connector/handoff_connector.py`);
- `pool.py`: starting, watching and restarting worker processes;
- `ray_workers.py`: workers as Ray actors in a placement group across a Ray cluster's nodes (`ray_address`);
- `router.py`: `DisaggLLM`, the `AsyncLLM` face over the workers (choice of prefill and decode worker);
- `autoscaler.py`: the role-moving policy (hysteresis, cooldown) on live metrics.
"""

from recipe.engine.disagg.config import DisaggConfig

__all__ = ["DisaggConfig"]
