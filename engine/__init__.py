"""The embedded engine (torch): takes token ids and sampling parameters, never JSON.

`from recipe.engine import LLM, SamplingParams, AsyncLLM, RequestOutput`.
"""

from recipe.engine.async_engine import AsyncLLM, EngineDeadError, QueueFullError
from recipe.engine.config import EngineConfig
from recipe.engine.llm import LLM
from recipe.engine.outputs import RequestOutput, RequestTiming
from recipe.engine.sampling_params import SamplingParams

__all__ = ["LLM", "AsyncLLM", "EngineConfig", "EngineDeadError", "QueueFullError", "RequestOutput", "RequestTiming", "SamplingParams"]
