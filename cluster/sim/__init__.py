"""A discrete-event model of the router, the workers and the autoscaler, fed by measured step-time curves.

- `curves.py`: `StepCurves`, step time against prefill tokens, decode batch and context (fitted or stated);
- `cluster.py`: `simulate(...)`, one run of a request trace over instances of given roles (with an autoscaler);
- `goodput.py`: SLO attainment, goodput search, and the request traces (Poisson, diurnal).
"""
