"""Speculative decoding: drafters propose tokens, the target verifies k+1 positions per sequence in one step.

`build_speculator(config, runner, ...)` makes the engine's `Speculator` for `EngineConfig.speculative`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from recipe.engine.speculative.cost_model import StepCost
from recipe.engine.speculative.drafter import Draft, Drafter
from recipe.engine.speculative.metrics import SpecMetrics
from recipe.engine.speculative.ngram import NgramDrafter
from recipe.engine.speculative.speculator import AUTO_MAX_DRAFT, Speculator

if TYPE_CHECKING:
    from recipe.engine.config import EngineConfig

__all__ = ["Draft", "Drafter", "NgramDrafter", "SpecMetrics", "Speculator", "StepCost", "build_speculator"]


def make_drafter(method: str, max_draft: int, model: Any, model_name: str, *, block_size: int, batched: bool,
                 full_vocab: bool = False, offline_weight: float | None = None, ngram_extend: bool = True,
                 ngram_match_buckets: bool = True, head_weights: str = "fp32") -> Drafter:
    if method == "ngram":
        return NgramDrafter(max_draft, extend=ngram_extend, match_buckets=ngram_match_buckets)
    if method == "draft-head":
        from recipe.engine.speculative.head_drafter import load_head_drafter

        return load_head_drafter(model, model_name, next(model.parameters()).dtype, full_vocab=full_vocab,
                                 offline_weight=offline_weight, q8_0=head_weights == "q8_0")
    if method == "mtp":
        from recipe.engine.speculative.mtp_drafter import load_mtp_drafter

        return load_mtp_drafter(model, block_size=block_size, batched=batched)
    raise ValueError(f"speculative={method!r} is not available for this model")


def build_speculator(config: EngineConfig, *, model: Any, runner: Any, run_on_model_thread: Any, block_manager: Any,
                     max_model_len: int, vocab_size: int) -> Speculator:
    """The speculator for `config.spec.speculative` ("auto" lengths: cost model loaded, or profiled now)."""
    spec = config.spec
    if spec.speculative is None:
        raise ValueError("build_speculator needs a drafter (EngineConfig.spec.speculative)")
    k = spec.num_speculative_tokens
    max_draft = AUTO_MAX_DRAFT if k == "auto" else int(k)
    drafter = make_drafter(spec.speculative, max_draft, model, config.checkpoint.model, block_size=runner.block_size,
                           batched=runner.attention_backend == "batched",
                           full_vocab=spec.speculative_draft_vocab == "full",
                           offline_weight=spec.speculative_offline_weight,
                           ngram_extend=spec.speculative_ngram_extend,
                           ngram_match_buckets=spec.speculative_ngram_match_buckets,
                           head_weights=spec.speculative_draft_head_weights)
    cost = None
    if k == "auto":
        if spec.speculative_cost_model is not None:
            cost = StepCost.load(spec.speculative_cost_model)
        else:
            from recipe.engine.speculative.profile import profile_step_cost

            cost = run_on_model_thread(lambda: profile_step_cost(
                runner, after_step=drafter.after_step, max_seqs=min(config.scheduler.max_num_seqs, 8),
                max_query=max_draft + 1,
                grid=spec.speculative_cost_fit != "plane", convex=spec.speculative_cost_fit == "convex"))
        cost.learn_cells, cost.fit_cells = spec.speculative_cost_cells, spec.speculative_cost_cells_fit
    return Speculator(drafter, k, block_manager=block_manager, max_model_len=max_model_len,
                      max_num_batched_tokens=config.scheduler.max_num_batched_tokens, vocab_size=vocab_size, cost=cost,
                      unverified_verdicts=spec.speculative_unverified_verdicts,
                      hit_window=spec.speculative_hit_window,
                      pause_margin=spec.speculative_pause_margin,
                      price_drafting=spec.speculative_price_drafting)
