"""The engine's side of disaggregated prefill and decode: what a request leaving prefill carries and the
transports its KV bytes travel on. The engine's end of the hand-off is its KV connector
(`engine/kv_connector/handoff_connector.py`); the router, workers and autoscaler that drive it are cluster
services (`recipe.cluster`), which depend on the engine, never the reverse.

- `handoff_descriptor.py`: `Handoff` / `SeqHandoff`, what a request leaving prefill carries beside its KV bytes;
- `transport_protocol.py`: the `Transport` interface and its error;
- `transport.py`: where hand-off KV bytes travel (a shared-memory segment per hand-off on one machine);
- `ray_transport.py`: the same through the Ray object store, between nodes.
"""
