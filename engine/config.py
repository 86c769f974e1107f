"""Engine configuration: small dataclasses grouped by concern, composed into one `EngineConfig`.

`LLM(model, **flat)` and `AsyncLLM(model, **flat)` take the fields by their flat names (`block_size=32`);
`EngineConfig.from_kwargs` sorts them into their groups, and the engine reads them grouped
(`config.kv.block_size`). Every field name is unique across the groups, so a flat name says its group. Each
group validates its own fields; `EngineConfig` checks the few rules that span groups. The measured reasons
behind the defaults are in docs/performance.md and the git log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

WEIGHT_FORMATS = ("dtype", "int8", "int4", "q8_0", "q4_1", "gguf", "gguf_q8")


def is_gguf_checkpoint(model: str) -> bool:
    """Whether `model` names a GGUF checkpoint: the demo model ("smollm2", a GGUF) or a `.gguf` path."""
    return model == "smollm2" or model.endswith(".gguf")


def option(default: Any, help: str, **flag: Any) -> Any:
    """A config field with its one-line help: what it does and why its default (the text of `recipe serve --help`
    and docs/flags.md). `flag` says how `recipe serve` spells it, read by `recipe.server.engine_flags`: `flag`
    (the option string; None: no flag), `metavar`, `choices`, `parse` (the value's parser by name), `repeat`
    (the flag repeats into a list), `serve_default` (the value `recipe serve` passes when the flag is unset)."""
    return field(default=default, metadata={"help": help, **flag})


def _check(checks: list[tuple[bool, str]]) -> None:
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


@dataclass
class CheckpointConfig:
    """Which model runs, in what dtype, on which device, and how long a sequence may grow."""

    model: str = option("smollm2", "checkpoint to serve: a .gguf file, a Hugging Face folder, or smollm2, "
                                   "the embedded SmolLM2-135M-Instruct demo model (no download)",
                                   metavar="NAME|PATH")
    dtype: str = option("float32", "weights and KV cache dtype: float32, bfloat16 or float16; float32 is "
                                   "exact on the CPU, where half types are slow", metavar="DTYPE")
    device: str = option("cpu", "where the model runs; the CPU is always there", flag=None)
    max_model_len: int | None = option(None, "most tokens (prompt + output) per sequence; unset: the model's "
                                             "own context length", metavar="N")

    def __post_init__(self) -> None:
        _check([(self.max_model_len is None or self.max_model_len >= 1, "max_model_len must be >= 1")])


@dataclass
class KernelConfig:
    """Which implementation each part of a step runs; every speed path keeps its reference as the off switch.

    "auto" / None values resolve per checkpoint (`resolved_for`): a GGUF checkpoint gets the fast path (its
    file's own blocks, native attention and norm, the fused decode step) unless `exact` asks for the reference.
    """

    weight_format: str = option("auto", "weights: gguf (a GGUF file's own blocks, fp32 activations), gguf_q8 "
                                        "(activations rounded to Q8_0 as llama.cpp does), dtype, int8/int4 "
                                        "(torch kernels), q8_0/q4_1 (re-quantised, native kernels); auto: "
                                        "gguf for a GGUF file, else dtype", choices=WEIGHT_FORMATS)
    attention_backend: str | None = option(None, "attention of the decode rows: reference (per sequence), "
                                                 "batched or native; unset: native for a GGUF file, else the "
                                                 "model's default",
                                                 choices=("reference", "batched", "native"))
    norm_backend: str = option("auto", "RMSNorm: torch's kernel or the native one; auto: native for a GGUF "
                                       "file, else torch", choices=("torch", "native"))
    decode_backend: str = option("auto", "decode-only steps of Llama models: per-layer modules (layers) or "
                                         "all layers in one native call (fused); auto: fused unless exact",
                                         choices=("layers", "fused"))
    linear_backend: str = option("torch", "fp32 linears of a few rows (verify steps, small batches): torch's "
                                          "F.linear, the reference, or weight-major (few-rows)",
                                          choices=("torch", "few-rows"))
    moe_backend: str = option("grouped", "mixture-of-experts layers: grouped matmuls, or loop (one matmul "
                                         "pair per expert, the reference)", flag=None)
    huge_pages: bool = option(True, "copy the CPU weights into transparent huge pages at start-up: fewer TLB "
                                    "misses per decode step, the same values")
    num_threads: int | None = option(None, "torch CPU threads; unset: every core this process may use",
                                           flag="--threads", metavar="N")
    step_threads: str | None = option(None, "intra-op threads per step: auto (profiled at start-up, about a "
                                            "second; small steps may run on fewer threads) or off (every "
                                            "step on all of them); unset: off in LLM, auto in recipe serve",
                                            choices=("auto", "off"), serve_default="auto")
    exact: bool = option(False, "the reference path for parity tests: each speed option left unset takes its "
                                "reference (dequantised weights, per-sequence attention, torch RMSNorm, "
                                "layered decode)")

    def __post_init__(self) -> None:
        _check([
            (self.num_threads is None or self.num_threads >= 1, "num_threads must be >= 1"),
            (self.step_threads in (None, "auto", "off"),
             f"step_threads must be 'auto', 'off' or None, got {self.step_threads!r}"),
            (self.attention_backend in (None, "batched", "native", "reference"),
             f"attention_backend must be 'batched', 'native', 'reference' or None, got {self.attention_backend!r}"),
            (self.weight_format == "auto" or self.weight_format in WEIGHT_FORMATS,
             f"weight_format must be one of {', '.join(map(repr, WEIGHT_FORMATS))}, got {self.weight_format!r}"),
            (self.norm_backend in ("auto", "native", "torch"),
             f"norm_backend must be 'native' or 'torch', got {self.norm_backend!r}"),
            (self.linear_backend in ("torch", "few-rows"),
             f"linear_backend must be 'torch' or 'few-rows', got {self.linear_backend!r}"),
            (self.decode_backend in ("auto", "layers", "fused"),
             f"decode_backend must be 'layers' or 'fused', got {self.decode_backend!r}"),
            (self.moe_backend in ("grouped", "loop"),
             f"moe_backend must be 'grouped' or 'loop', got {self.moe_backend!r}"),
        ])

    def resolved_for(self, model: str) -> KernelConfig:
        """The "auto" / None choices made for `model` (the fast path for a GGUF checkpoint unless `exact`)."""
        fast = is_gguf_checkpoint(model) and not self.exact
        return dataclasses.replace(
            self,
            weight_format=("gguf" if fast else "dtype") if self.weight_format == "auto" else self.weight_format,
            norm_backend=("native" if fast else "torch") if self.norm_backend == "auto" else self.norm_backend,
            attention_backend=(("native" if fast else ("reference" if self.exact else None))
                               if self.attention_backend is None else self.attention_backend),
            decode_backend=("layers" if self.exact else "fused") if self.decode_backend == "auto"
            else self.decode_backend,
        )


@dataclass
class KVCacheConfig:
    """The paged KV pool, prefix caching, and the lower tiers (host memory, a directory) below it.

    Pool size: `num_kv_blocks` if given, else `kv_cache_bytes`, else `kv_cache_fraction` of the device's free
    memory (capped at `kv_cache_max_bytes` on the CPU, whose memory everything else shares).
    """

    block_size: int = option(16, "tokens per KV block; small blocks share more prefix, 16 keeps block tables "
                                 "short", flag=None)
    num_kv_blocks: int | None = option(None, "fixed pool size in blocks; unset: sized from the byte budget",
                                             flag=None)
    kv_cache_bytes: int | None = option(None, "KV pool memory in bytes; unset: kv_cache_fraction of free "
                                              "memory, capped on the CPU", metavar="BYTES")
    kv_cache_fraction: float = option(0.5, "share of free device memory the pool takes; half leaves room for "
                                           "activations", flag=None)
    kv_cache_max_bytes: int = option(2 << 30, "CPU cap on the fraction-sized pool; host memory is shared "
                                              "with everything else", flag=None)
    enable_prefix_caching: bool = option(True, "reuse the KV of earlier requests' common prefixes; chat "
                                               "turns share most of theirs")
    release_window_blocks: bool = option(True, "sliding-window caches (DeepSeek-V4) give back the blocks "
                                               "that slid out", flag=None)
    kv_host_bytes: int | None = option(None, "host-memory KV tier of this many bytes in a shared-memory "
                                             "segment; unset: off", parse="bytes", metavar="BYTES")
    kv_dir: str | None = option(None, "persistent KV tier in this directory, kept across restarts and shared "
                                      "by servers; unset: off", metavar="PATH")
    kv_disk_bytes: int | None = option(None, "byte budget of kv_dir, least recently used blocks out first; "
                                             "unset: no cap", parse="bytes", metavar="BYTES")
    kv_retention: Any = option(None, "retention classes over the defaults chat=7d, agent=3d, each "  # noqa: RUF009 (a field)
                                     "CLASS=DURATION (LLM takes a mapping or a list of them; the flag "
                                     "repeats), normalised to seconds",
                                     parse="retention", repeat=True, metavar="CLASS=DURATION")

    def __post_init__(self) -> None:
        _check([
            (self.block_size >= 1 and (self.block_size & (self.block_size - 1)) == 0,
             f"block_size must be a power of two, got {self.block_size}"),
            (self.num_kv_blocks is None or self.num_kv_blocks >= 1, "num_kv_blocks must be >= 1"),
            (self.kv_cache_bytes is None or self.kv_cache_bytes > 0, "kv_cache_bytes must be > 0"),
            (0.0 < self.kv_cache_fraction <= 1.0, "kv_cache_fraction must be in (0, 1]"),
            (self.kv_host_bytes is None or self.kv_host_bytes > 0, "kv_host_bytes must be > 0"),
            (self.kv_disk_bytes is None or self.kv_disk_bytes > 0, "kv_disk_bytes must be > 0"),
            (self.kv_disk_bytes is None or self.kv_dir is not None, "kv_disk_bytes needs kv_dir"),
            (not self.kv_tiers_enabled or self.enable_prefix_caching,
             "the lower KV tiers (kv_host_bytes, kv_dir) need enable_prefix_caching"),
        ])
        self.kv_retention = retention_seconds(self.kv_retention)

    @property
    def kv_tiers_enabled(self) -> bool:
        return self.kv_host_bytes is not None or self.kv_dir is not None


@dataclass
class SessionCacheConfig:
    """The sliding-window session cache (DeepSeek-V4 only, `engine/session_cache.py`); off by default."""

    swa_session_bytes: int | None = option(None, "keep active sessions' window state in this much host "
                                                 "memory; unset: off", parse="bytes", metavar="BYTES")
    swa_session_ttl: float = option(180.0, "drop a session's window state after this many idle seconds; 180 "
                                           "covers a chat turn's think time",
                                           parse="positive", metavar="SECONDS")
    swa_session_grain: int = option(128, "keep window state at multiples of this many tokens (a multiple of "
                                         "block_size)", parse="positive", metavar="TOKENS")
    swa_replay: bool = option(True, "window-miss replay: recompute only the last tokens before the boundary, "
                                    "not the whole prompt; off (--no-swa-replay): recompute the prompt",
                              flag="--no-swa-replay")
    swa_replay_margin: int | None = option(None, "on a window miss replay the sliding window plus this many "
                                                 "tokens; unset (or exact): the model's exact margin",
                                                 parse="replay_margin", metavar="exact|TOKENS")
    swa_persist_window: bool = option(True, "with the lower KV tiers on, window state at each grain goes "
                                            "down to them too", flag=None)

    def __post_init__(self) -> None:
        _check([
            (self.swa_session_bytes is None or self.swa_session_bytes > 0, "swa_session_bytes must be > 0"),
            (self.swa_session_ttl > 0, "swa_session_ttl must be > 0"),
            (self.swa_session_grain >= 1, "swa_session_grain must be >= 1"),
            (self.swa_replay_margin is None or self.swa_replay_margin >= 0, "swa_replay_margin must be >= 0"),
        ])


@dataclass
class SchedulerConfig:
    """What one step may hold and how steps overlap."""

    max_num_seqs: int = option(64, "most sequences in one step; 64 fills the CPU's matmuls at small models",
                                   metavar="N")
    max_num_batched_tokens: int = option(1024, "token budget of one step (prefill chunks + decodes); bounds "
                                               "a step's time", metavar="N")
    async_scheduling: bool = option(True, "schedule the next step while the model runs this one")
    max_waiting_requests: int = option(4096, "AsyncLLM: more queued requests raise QueueFullError (HTTP "
                                             "429), bounding memory", flag=None)

    def __post_init__(self) -> None:
        _check([
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.max_waiting_requests >= 1, "max_waiting_requests must be >= 1"),
        ])


@dataclass
class SpeculativeConfig:
    """Speculative decoding (`engine/speculative`): the drafter, how many tokens it drafts, and the policy's
    knobs. Each `True` default is a measured improvement whose `False` is the earlier policy, kept as its
    reference."""

    speculative: str | None = option(None, "speculative decoding drafter: ngram, draft-head or mtp; unset: "
                                           "off, plain decoding",
                                           choices=("ngram", "draft-head", "mtp"), metavar="METHOD")
    num_speculative_tokens: int | str = option("auto", "draft tokens per step: an integer in [1, 16], or "
                                                       "auto (per sequence and step, from confidences and "
                                                       "step costs)", parse="draft_tokens", metavar="K|auto")
    speculative_cost_model: str | None = option(None, "JSON step cost model for auto; unset: profiled at "
                                                      "start-up", flag=None)
    speculative_cost_fit: str = option("convex", "auto: the profiled step costs interpolated convex in "
                                                 "tokens, non-decreasing (grid), or as a least-squares plane",
                                                 choices=("convex", "grid", "plane"))
    speculative_cost_cells: bool = option(True, "auto learns each step shape's cost online over the start-up "
                                                "profile's (off: one running correction)")
    speculative_cost_cells_fit: bool = option(True, "auto refits each batch size's learned step costs convex "
                                                    "in tokens, weighted by their observations (off: the "
                                                    "cells' own factors)")
    speculative_draft_vocab: str = option("reduced", "draft-head: draft from the head's frequency-ranked "
                                                     "vocabulary (reduced) or the whole one (full)",
                                                     choices=("reduced", "full"))
    speculative_draft_head_weights: str = option("q8_0", "draft-head: draft with Q8_0 copies of the head's "
                                                         "weights (faster drafts) or the weights as loaded "
                                                         "(fp32)", choices=("q8_0", "fp32"))
    speculative_async: bool = option(True, "with async scheduling, steps that verify no draft overlap the "
                                           "next one (off: every speculative step waits for its predecessor)")
    speculative_unverified_verdicts: bool = option(True, "the drafter calibrates on every proposal's "
                                                         "verdict, read off the emitted tokens, also where "
                                                         "auto verified none")
    speculative_hit_window: int = option(24, "auto pauses drafting on the first draft tokens' hit rate over "
                                             "about this many drafts; 24 damps the noise",
                                             parse="positive", metavar="N")
    speculative_pause_margin: float = option(0.6, "auto pauses below this times break-even and resumes at "
                                                  "break-even (hysteresis; 1: none)", metavar="F")
    speculative_offline_weight: float | None = option(20.0, "draft-head: a calibration bin's offline "
                                                            "verdicts weigh at most as much as this many of "
                                                            "the run's own; None: no cap", metavar="N")
    speculative_price_drafting: bool = option(True, "auto prices the drafter's own time: a chained draft "
                                                    "stops where its next position no longer pays for itself, "
                                                    "and the length policy counts the drafting time")
    speculative_ngram_extend: bool = option(True, "ngram: drafts continue after the latest occurrence "
                                                  "through their own tokens past the end, so a longer draft "
                                                  "keeps its first tokens (off: the latest occurrence followed "
                                                  "by a whole draft, else the earliest)")
    speculative_ngram_match_buckets: bool = option(True, "ngram: calibrate confidences by how far back the "
                                                         "occurrence matches (up to 32 tokens), not by the "
                                                         "n-gram alone")

    def __post_init__(self) -> None:
        _check([
            (self.speculative in (None, "ngram", "draft-head", "mtp"),
             f"speculative must be None, 'ngram', 'draft-head' or 'mtp', got {self.speculative!r}"),
            (self.speculative_draft_head_weights in ("q8_0", "fp32"),
             f"speculative_draft_head_weights must be 'q8_0' or 'fp32', got {self.speculative_draft_head_weights!r}"),
            (self.speculative_draft_vocab in ("reduced", "full"),
             f"speculative_draft_vocab must be 'reduced' or 'full', got {self.speculative_draft_vocab!r}"),
            (self.speculative_hit_window >= 1, "speculative_hit_window must be >= 1"),
            (0.0 < self.speculative_pause_margin <= 1.0, "speculative_pause_margin must be in (0, 1]"),
            (self.speculative_offline_weight is None or self.speculative_offline_weight >= 0,
             "speculative_offline_weight must be >= 0"),
            (self.speculative_cost_fit in ("convex", "grid", "plane"),
             f"speculative_cost_fit must be 'convex', 'grid' or 'plane', got {self.speculative_cost_fit!r}"),
            (self.num_speculative_tokens == "auto" or (isinstance(self.num_speculative_tokens, int)
                                                       and not isinstance(self.num_speculative_tokens, bool)
                                                       and 1 <= self.num_speculative_tokens <= 16),
             f"num_speculative_tokens must be 'auto' or an int in [1, 16], got {self.num_speculative_tokens!r}"),
        ])


@dataclass
class ParallelConfig:
    """Expert parallelism (`engine/expert_parallel`): rank processes and expert load balancing."""

    expert_parallel_size: int = option(1, "serve a mixture-of-experts checkpoint from this many rank "
                                          "processes, routed experts sharded, attention data-parallel; 1: "
                                          "one process", metavar="N")
    eplb_interval_steps: int | None = option(None, "rebalance expert placement every this many steps; unset: "
                                                   "never", flag=None)
    eplb_redundant_experts: int = option(0, "extra expert replicas the rebalancer may place; 0: each expert "
                                            "once", flag=None)

    def __post_init__(self) -> None:
        _check([
            (self.expert_parallel_size >= 1, "expert_parallel_size must be >= 1"),
            (self.eplb_interval_steps is None or self.eplb_interval_steps >= 1, "eplb_interval_steps must be >= 1"),
            (self.eplb_redundant_experts >= 0, "eplb_redundant_experts must be >= 0"),
        ])


GROUPS: dict[str, type] = {"checkpoint": CheckpointConfig, "kv": KVCacheConfig, "session": SessionCacheConfig,
                           "scheduler": SchedulerConfig, "spec": SpeculativeConfig, "parallel": ParallelConfig,
                           "kernels": KernelConfig}
"""`EngineConfig`'s attribute name of each group, in the order `--help` and docs/flags.md show them."""


def group_of(name: str) -> str:
    """The group attribute holding the flat field `name` (KeyError if none does)."""
    return _GROUP_OF[name]


@dataclass
class EngineConfig:
    """What `LLM(model, **flat)` and `AsyncLLM(model, **flat)` accept, grouped by concern.

    Build it with `EngineConfig.from_kwargs(model, **flat)`; `flat()` gives the flat keyword arguments back (the
    form that crosses process boundaries to disaggregated workers and expert-parallel ranks).
    """

    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    kernels: KernelConfig = field(default_factory=KernelConfig)
    kv: KVCacheConfig = field(default_factory=KVCacheConfig)
    session: SessionCacheConfig = field(default_factory=SessionCacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    spec: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)

    def __post_init__(self) -> None:
        self.kernels = self.kernels.resolved_for(self.checkpoint.model)
        _check([
            (self.session.swa_session_grain % self.kv.block_size == 0,
             f"swa_session_grain must be a multiple of block_size ({self.kv.block_size})"),
            (self.session.swa_session_bytes is None or self.kv.enable_prefix_caching,
             "the sliding-window session cache (swa_session_bytes) needs enable_prefix_caching"),
        ])

    @property
    def compute_path(self) -> str:
        """One line naming the path a step runs (`recipe serve` prints it at start-up)."""
        k = self.kernels
        weights = {"gguf": "the GGUF file's own quantised blocks, fp32 activations (native kernels)",
                   "gguf_q8": "the GGUF file's own quantised blocks, Q8_0-rounded activations (native kernels)",
                   "dtype": f"{self.checkpoint.dtype} weights",
                   "q8_0": "weights re-quantised to q8_0 (native kernels)",
                   "q4_1": "weights re-quantised to q4_1 (native kernels)"}.get(str(k.weight_format),
                                                                               f"{k.weight_format} weights")
        kind = ("exact reference path" if k.exact
                else "fast path" if str(k.weight_format).startswith("gguf") else "path")
        attention = k.attention_backend or "model default"
        return f"{kind}: {weights}, {attention} attention, {k.norm_backend} RMSNorm, {k.decode_backend} decode step"

    def flat(self) -> dict[str, Any]:
        """Every field by its flat name, as `from_kwargs` takes them."""
        return {f.name: getattr(getattr(self, g), f.name)
                for g in GROUPS for f in dataclasses.fields(getattr(self, g))}

    @classmethod
    def from_kwargs(cls, model: str = "smollm2", **config: object) -> EngineConfig:
        """Build from flat keyword arguments, naming any unknown key instead of failing obscurely."""
        unknown = sorted(set(config) - set(_GROUP_OF))
        if unknown:
            raise TypeError(f"unknown engine config option(s) {unknown}; known: {sorted(set(_GROUP_OF) - {'model'})}")
        grouped: dict[str, dict[str, object]] = {g: {} for g in GROUPS}
        for name, value in {"model": model, **config}.items():
            grouped[_GROUP_OF[name]][name] = value
        return cls(**{g: GROUPS[g](**values) for g, values in grouped.items()})


_GROUP_OF: dict[str, str] = {f.name: g for g, group in GROUPS.items() for f in dataclasses.fields(group)}


def retention_seconds(value: Mapping[str, Any] | Iterable[str] | None) -> dict[str, float]:
    """Retention classes as {class: seconds}, the defaults (chat 7d, agent 3d) overridden by `value`."""
    from recipe.engine.kv_tiers.retention import (
        DEFAULT_CLASSES,
        check_class_name,
        parse_duration,
        parse_retention,
    )

    if value is None:
        given: dict[str, float] = {}
    elif isinstance(value, Mapping):
        given = {check_class_name(str(k)): v if isinstance(v, (int, float)) else parse_duration(str(v))
                 for k, v in value.items()}
    elif isinstance(value, str):
        given = parse_retention([value])
    else:
        given = parse_retention(value)
    out = {**DEFAULT_CLASSES, **{k: float(v) for k, v in given.items()}}
    bad = [k for k, v in out.items() if v <= 0]
    if bad:
        raise ValueError(f"retention of class(es) {bad} must be > 0")
    return out
