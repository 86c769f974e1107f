"""`LLM(model, **config).generate(prompts, sampling_params)`: offline batch generation."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

from recipe.engine.expert_parallel.ep_engine import create_engine
from recipe.engine.outputs import RequestOutput, RequestTiming, TokenLogprob
from recipe.engine.sampling_params import SamplingParams

Prompt = list[int] | str


class LLM:
    """An engine for offline use. `model` is a registered name ("smollm2"), a checkpoint path, or a
    ready `(model, ModelInfo)` pair; `config` are `EngineConfig` fields."""

    def __init__(self, model: Any = "smollm2", **config: Any) -> None:
        self.engine = create_engine(model, **config)  # expert_parallel_size > 1: rank processes
        self.model_info = self.engine.model_info
        self._tokenizer: Any = None
        self._ids = itertools.count()

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer (`recipe.tokenizer.Tokenizer`), or None if the model ships none."""
        if self._tokenizer is None and getattr(self.model_info, "tokenizer_json", None):
            from recipe.tokenizer import Tokenizer

            self._tokenizer = Tokenizer(self.model_info.tokenizer_json)
        return self._tokenizer

    def encode(self, text: str) -> list[int]:
        """Text (special-token spellings included) -> ids with the model's tokenizer."""
        if self.tokenizer is None:
            raise ValueError("this model has no tokenizer: pass token ids")
        return list(self.tokenizer.full.encode(text, add_special_tokens=False).ids)

    def generate(self, prompts: Prompt | Sequence[Prompt], sampling_params: SamplingParams | Sequence[SamplingParams]
                 | None = None, *, progress: Callable[[int, int], None] | None = None) -> list[RequestOutput]:
        """Complete outputs, one per (prompt, choice), in prompt order then choice order.

        `progress(done, total)` is called as requests finish (e.g. to drive a progress bar).
        """
        if isinstance(prompts, str) or (isinstance(prompts, list) and prompts and isinstance(prompts[0], int)):
            prompts = [prompts]  # type: ignore[list-item]
        prompt_list = list(prompts)
        if sampling_params is None:
            sampling_params = SamplingParams()
        params_list = ([sampling_params] * len(prompt_list) if isinstance(sampling_params, SamplingParams)
                       else list(sampling_params))
        if len(params_list) != len(prompt_list):
            raise ValueError(f"{len(prompt_list)} prompts but {len(params_list)} sampling params")
        request_ids = [f"gen-{next(self._ids)}" for _ in prompt_list]
        keys: list[tuple[str, int]] = []
        tokens: dict[tuple[str, int], list[int]] = {}
        logprobs: dict[tuple[str, int], list[TokenLogprob | None]] = {}
        finals: dict[tuple[str, int], RequestOutput] = {}
        times: dict[tuple[str, int], list[float]] = {}
        encoded = []  # all checked before any is queued: a bad prompt leaves the engine untouched
        for i, (prompt, params) in enumerate(zip(prompt_list, params_list, strict=True)):
            try:
                encoded.append(self.engine.validate(self.encode(prompt) if isinstance(prompt, str) else prompt, params))
            except (ValueError, TypeError) as exc:
                raise type(exc)(f"prompt {i}: {exc}") from None
        for rid, ids, params in zip(request_ids, encoded, params_list, strict=True):
            self.engine.add_request(rid, ids, params)
            for i in range(params.n):
                keys.append((rid, i))
                tokens[(rid, i)], logprobs[(rid, i)], times[(rid, i)] = [], [], []
        total = len(keys)
        while self.engine.has_unfinished_requests():
            for out in self.engine.step():
                key = (out.request_id, out.index)
                tokens[key].extend(out.new_token_ids)
                times[key].extend(out.timing.token_times)
                if out.new_logprobs is not None:
                    logprobs[key].extend(out.new_logprobs)
                if out.finished:
                    finals[key] = out
                    if progress is not None:
                        progress(len(finals), total)
        results = []
        for rid, params in zip(request_ids, params_list, strict=True):
            for i in range(params.n):
                key = (rid, i)
                last = finals[key]
                results.append(RequestOutput(
                    request_id=rid, index=i, new_token_ids=tuple(tokens[key]),
                    new_logprobs=tuple(logprobs[key]) if params.logprobs is not None else None,
                    finished=True, finish_reason=last.finish_reason, prompt_tokens=last.prompt_tokens,
                    cached_tokens=last.cached_tokens,
                    timing=RequestTiming(last.timing.arrival_time, last.timing.first_token_time, tuple(times[key]),
                                         last.timing.scheduled_time),
                    stop_token_id=last.stop_token_id,
                    text=self.tokenizer.decode(tokens[key], skip_special_tokens=True) if self.tokenizer else None,
                ))
        return results

    def shutdown(self) -> None:
        self.engine.shutdown()

    def __del__(self) -> None:
        engine = getattr(self, "engine", None)
        if engine is not None:
            engine.shutdown()
