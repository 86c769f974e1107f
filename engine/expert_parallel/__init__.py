"""Expert parallelism for the DeepSeek MoE layers, and EPLB (the expert-placement load balancer).

One concept per file: `placement.py` (which rank's slot holds which expert), `eplb_planner.py` (the pure
planner), `process_group.py` (launching ranks), `all_to_all.py` (dispatch and combine), `ep_moe.py` (the
expert-parallel MoE computation and sharded weights), `load_recorder.py`, `metrics.py`.
"""
