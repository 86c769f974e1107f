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


def _check(checks: list[tuple[bool, str]]) -> None:
    for ok, message in checks:
        if not ok:
            raise ValueError(message)


@dataclass
class CheckpointConfig:
    """Which model runs, in what dtype, on which device, and how long a sequence may grow."""

    model: str = "smollm2"  # a checkpoint path or name; the embedded demo model needs no download
    dtype: str = "float32"  # weights and KV dtype; fp32 is exact on the CPU, where half types are slow
    device: str = "cpu"  # where the model runs; the CPU is always there
    max_model_len: int | None = None  # most tokens per sequence; None: the model's own context length

    def __post_init__(self) -> None:
        _check([(self.max_model_len is None or self.max_model_len >= 1, "max_model_len must be >= 1")])


@dataclass
class KernelConfig:
    """Which implementation each part of a step runs; every speed path keeps its reference as the off switch.

    "auto" / None values resolve per checkpoint (`resolved_for`): a GGUF checkpoint gets the fast path (its
    file's own blocks, native attention and norm, the fused decode step) unless `exact` asks for the reference.
    """

    # "dtype" | "int8" | "int4" | "q8_0" | "q4_1" | "gguf" | "gguf_q8"; "auto": a GGUF file's own blocks, else dtype
    weight_format: str = "auto"
    # "reference" (per sequence) | "batched" | "native" | None; None: native for GGUF, else the model's default
    attention_backend: str | None = None
    norm_backend: str = "auto"  # "native" | "torch" RMSNorm; "auto": native for a GGUF checkpoint, else torch
    decode_backend: str = "auto"  # "fused" (all layers in one native call) | "layers"; "auto": fused unless exact
    linear_backend: str = "torch"  # "torch" | "few-rows" (weight-major small-row products); torch is the reference
    moe_backend: str = "grouped"  # "grouped" | "loop" (one matmul pair per expert, the reference)
    huge_pages: bool = True  # CPU weights copied into transparent huge pages; fewer TLB misses per decode step
    num_threads: int | None = None  # torch CPU threads; None: every core this process may use
    step_threads: str | None = None  # "auto": per-step-size thread counts profiled at start-up; None/"off": all
    exact: bool = False  # every speed option left unset takes its reference path (for parity tests)

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

    block_size: int = 16  # tokens per KV block; small blocks share more prefix, 16 keeps tables short
    num_kv_blocks: int | None = None  # fixed pool size in blocks; None: sized from the byte budget
    kv_cache_bytes: int | None = None  # pool bytes; None: a fraction of free memory
    kv_cache_fraction: float = 0.5  # share of free device memory the pool takes; half leaves room for activations
    kv_cache_max_bytes: int = 2 << 30  # CPU cap on the fraction-sized pool; host RAM is shared with everything
    enable_prefix_caching: bool = True  # reuse earlier requests' KV for a common prefix; chat turns share most
    release_window_blocks: bool = True  # sliding-window caches (DeepSeek-V4) give back blocks that slid out
    kv_host_bytes: int | None = None  # host-memory tier budget (a shared-memory segment); None: off
    kv_dir: str | None = None  # persistent directory tier, kept across restarts; None: off
    kv_disk_bytes: int | None = None  # directory tier byte cap, least recently used out first; None: no cap
    # retention classes over the defaults chat=7d, agent=3d: {"chat": "7d"} or ["agent=3d"]; normalised to seconds
    kv_retention: Any = None

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

    swa_session_bytes: int | None = None  # host budget for active sessions' window state; None: off
    swa_session_ttl: float = 180.0  # idle seconds before a session's window state expires; a chat turn's think time
    swa_session_grain: int = 128  # window state is kept at multiples of this many tokens (a block multiple)
    swa_replay: bool = True  # on a window miss replay only the last tokens before the boundary, not the prompt
    swa_replay_margin: int | None = None  # replay sliding_window + this many tokens; None: the model's exact margin
    swa_persist_window: bool = True  # with the lower KV tiers on, window state at each grain goes down too

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

    max_num_seqs: int = 64  # sequences in one step; enough to fill the CPU's matmuls at small models
    max_num_batched_tokens: int = 1024  # token budget of one step (prefill chunks + decodes); bounds a step's time
    async_scheduling: bool = True  # schedule the next step while the model runs this one
    max_waiting_requests: int = 4096  # AsyncLLM: more queued requests raise QueueFullError, bounding memory

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

    speculative: str | None = None  # drafter: None (off) | "ngram" | "draft-head" | "mtp"; off keeps plain decode
    # draft tokens per step: an int in [1, 16], or "auto" (per sequence and step, from confidences and step costs)
    num_speculative_tokens: int | str = "auto"
    speculative_cost_model: str | None = None  # JSON step cost model for "auto"; None: profiled at start-up
    speculative_cost_fit: str = "convex"  # how profiled costs interpolate: "convex" | "grid" | "plane"
    speculative_cost_cells: bool = True  # "auto" learns each step shape's cost online over the start-up profile
    speculative_cost_cells_fit: bool = True  # learned costs refitted in the profile's shape, weighted by count
    speculative_draft_vocab: str = "reduced"  # draft-head: "reduced" frequency-ranked vocabulary | "full"
    speculative_draft_head_weights: str = "q8_0"  # draft-head: "q8_0" copies (faster drafts) | "fp32" as loaded
    speculative_async: bool = True  # steps that verify no draft overlap the next step's scheduling
    speculative_unverified_verdicts: bool = True  # calibrate on every proposal's verdict, also unverified positions
    speculative_hit_window: int = 24  # drafts in the running hit rate "auto" pauses on; long enough to damp noise
    speculative_pause_margin: float = 0.6  # pause below this times break-even, resume at break-even (hysteresis)
    speculative_offline_weight: float | None = 20.0  # draft-head: cap on offline calibration counts; None: all
    speculative_price_drafting: bool = True  # "auto" stops a chained draft where its next position costs more
    speculative_ngram_extend: bool = True  # ngram: drafts continue through their own tokens past the sequence end
    speculative_ngram_match_buckets: bool = True  # ngram: calibrate per match length bucket, not per n alone

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

    expert_parallel_size: int = 1  # rank processes, routed experts sharded, attention data-parallel; 1: off
    eplb_interval_steps: int | None = None  # rebalance expert placement every this many steps; None: never
    eplb_redundant_experts: int = 0  # extra expert replicas the rebalancer may place; 0: each expert once

    def __post_init__(self) -> None:
        _check([
            (self.expert_parallel_size >= 1, "expert_parallel_size must be >= 1"),
            (self.eplb_interval_steps is None or self.eplb_interval_steps >= 1, "eplb_interval_steps must be >= 1"),
            (self.eplb_redundant_experts >= 0, "eplb_redundant_experts must be >= 0"),
        ])


GROUPS: dict[str, type] = {"checkpoint": CheckpointConfig, "kernels": KernelConfig, "kv": KVCacheConfig,
                           "session": SessionCacheConfig, "scheduler": SchedulerConfig, "spec": SpeculativeConfig,
                           "parallel": ParallelConfig}
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
