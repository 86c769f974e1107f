"""Cluster services beside the engine: engine worker processes in roles, the router that fronts them, the
autoscaler that moves them between roles, and a simulator of the whole. They depend on `recipe.engine`
(its hand-off connector in `engine/kv_connector/`, the transports in `engine/disagg/`), never the reverse.

- `messages.py`: what the router and the workers say to each other (pickled over a pipe or through Ray);
- `config.py`: `DisaggConfig`, how many workers of each role, and the hand-off limits;
- `constraint_wire.py`: a request's constraint in a form that crosses to a worker process;
- `worker.py`: one engine process and its role (`prefill`, `decode`, `both`), pinned to its own cores;
- `pool.py`: starting, watching and restarting worker processes;
- `ray_workers.py`: workers as Ray actors in a placement group across a Ray cluster's nodes (`ray_address`);
- `routing.py`: prefix index and load scores that choose a worker;
- `request_state.py`, `request_flow.py`: one request's state and its path through the workers;
- `router.py`: `DisaggLLM`, the `AsyncLLM` face over the workers (choice of prefill and decode worker);
- `live_metrics.py`: sliding windows of TTFT / TPOT and the workers' load;
- `autoscaler.py`: the role-moving policy (hysteresis, cooldown) on live metrics;
- `sim/`: a discrete-event model of router, workers and autoscaler on measured step-time curves.
"""

from recipe.cluster.config import DisaggConfig

__all__ = ["DisaggConfig"]
