"""The embedded engine (torch): takes token ids and sampling parameters, never JSON.

`from recipe.engine import LLM, SamplingParams, AsyncLLM, RequestOutput`.

The map: each technique and the modules that implement it (paths from the repository root; `cluster/` is the
package beside the engine that depends on it, never the reverse).

- engine protocol: `EngineCore` (add, abort, step, shutdown) and `EngineClient` in `engine/core.py`; the
  colocated engine `engine/llm_engine.py`, `AsyncLLM` in `engine/async_engine.py`, offline `LLM` in
  `engine/llm.py`;
- configuration: `EngineConfig`, grouped by concern, in `engine/config.py`;
- continuous batching: the scheduler (chunked prefill, preemption, a token budget per step)
  `engine/scheduler.py`, over `engine/sequence.py`; one step's data `engine/step.py`, run by
  `engine/model_runner.py`;
- async scheduling: the next step scheduled while the one in flight runs, its placeholder inputs filled on the
  model thread: `engine/llm_engine.py` (`step`), `engine/model_runner.py`;
- paged KV: one KV manager parametrised by its cache kinds, `engine/block_manager.py` (built by
  `engine/kv_manager.py`, kind geometry `engine/kv_kinds.py`) over `engine/block_pool.py`; the tensors
  `engine/kv_cache.py`, paged attention `engine/layers/attention.py`;
- prefix caching: chained block hashes (`chain_hash`) registered in `engine/block_pool.py`, matched by
  `engine/block_manager.py`;
- KV tiers: host memory and a directory below the paged pool, `engine/kv_tiers/`;
- session cache: DeepSeek-V4's sliding-window state per session, `engine/session_cache.py` and
  `engine/window_sessions.py`;
- sampling: penalties, temperature, top-k/top-p/min-p, seeded per position, `engine/sampler.py`, with the
  request's parameters in `engine/sampling_params.py`;
- structured output: each row's constraint bitmask in `engine/model_runner.py` (`_bitmask`), applied by
  `engine/sampler.py`; drafts cut to what the constraint allows, `engine/speculative/constrained_drafts.py`
  (the grammars are `recipe.constraints`);
- speculative decoding: drafters (n-gram, draft head, MTP), length policy and verification,
  `engine/speculative/` (`engine/speculative/speculator.py`, `engine/speculative/verification.py`);
- expert parallelism: ranks, all-to-all dispatch and EPLB, `engine/expert_parallel/` (driver
  `engine/expert_parallel/ep_engine.py`);
- DeepSeek-V4: `engine/models/deepseek_v4.py` (its MTP layer `engine/models/deepseek_v4_mtp.py`), attention
  and KV plan `engine/layers/v4_attention.py`, `engine/layers/v4_kv.py`;
- models: Llama and SmolLM2 `engine/models/llama.py`, DeepSeek-V3 `engine/models/deepseek_v3.py`, loading
  by name, folder or file `engine/models/registry.py`, shared layers `engine/layers/`;
- GGUF: `engine/models/gguf_loader.py` over `engine/models/gguf_file.py`, quantised linears
  `engine/layers/gguf_linear.py` on the native kernels of `engine/kernels/`;
- hand-off: prefill to decode as a KV connector, `engine/kv_connector/`
  (`engine/kv_connector/handoff_connector.py`), what it carries `engine/disagg/handoff_descriptor.py`, its
  transports `engine/disagg/transport.py`; the router, workers, autoscaler and simulator that drive it
  `cluster/` (`cluster/router.py`, `cluster/autoscaler.py`, `cluster/sim/`);
- CPU speed: native kernels `engine/kernels/`, threads per step `engine/step_threads.py`, huge pages
  `engine/huge_pages.py`, few-row linears `engine/layers/few_rows_linear.py`, what each linear runs on
  `engine/linear_census.py`.
"""

from recipe.engine.async_engine import AsyncLLM, EngineDeadError, QueueFullError
from recipe.engine.config import EngineConfig
from recipe.engine.llm import LLM
from recipe.engine.outputs import RequestOutput, RequestTiming
from recipe.engine.sampling_params import SamplingParams

__all__ = ["LLM", "AsyncLLM", "EngineConfig", "EngineDeadError", "QueueFullError", "RequestOutput", "RequestTiming", "SamplingParams"]
