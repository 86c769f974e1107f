"""KV connectors: moving a request's KV blocks (every cache kind) between engines.

- `base.py`: `KVConnector`, a scheduler half (which requests' blocks move, and when) and a worker half (the
  block copies), and `ConnectorHost`, what a connector sees of its engine;
- `kv_payload.py`: one sequence's blocks of every kind as named arrays, and back;
- `handoff_connector.py`: prefill -> decode hand-off (prefill saves at the first token, decode reserves,
  loads and continues);
- `memory_transport.py`: an in-process transport (tests, one-process pairs of engines).
"""
