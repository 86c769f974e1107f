"""Engine configuration: one dataclass, validated on construction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

WEIGHT_FORMATS = ("dtype", "int8", "int4", "q8_0", "q4_1", "gguf", "gguf_q8")


def is_gguf_checkpoint(model: str) -> bool:
    """Whether `model` names a GGUF checkpoint: the demo model ("smollm2", a GGUF) or a `.gguf` path."""
    return model == "smollm2" or model.endswith(".gguf")


@dataclass
class EngineConfig:
    """What `LLM(model, **config)` and `AsyncLLM(model, **config)` accept as keyword arguments.

    KV memory: `num_kv_blocks` fixes the pool size; otherwise the pool gets `kv_cache_bytes`, or by default
    `kv_cache_fraction` of the device's free memory (capped at `kv_cache_max_bytes` on the CPU, where
    the memory is shared with everything else).

    Lower KV tiers (`engine/kv_tiers`, both off by default; they need prefix caching): `kv_host_bytes`
    sizes the host-memory tier (a shared-memory segment); `kv_dir` turns on the persistent directory tier,
    `kv_disk_bytes` caps it (None: no cap). `kv_retention` sets retention classes, as `{"chat": "7d"}` or
    `["agent=3d", "batch=12h"]`, over the defaults chat=7d and agent=3d (normalised to seconds).

    Sliding-window session cache (DeepSeek-V4 only, off by default): `swa_session_bytes` is its host budget,
    `swa_session_ttl` the idle TTL, `swa_session_grain` the token grain window state is kept at. On a window
    miss `swa_replay` replays `sliding_window + swa_replay_margin` tokens (None: the model's exact margin).
    With the lower KV tiers on, a V4 model's compressed blocks go down to them, and (`swa_persist_window`)
    its window state at each grain boundary; False keeps only compressed blocks there (a miss then replays).
    """

    model: str = "smollm2"
    dtype: str = "float32"
    device: str = "cpu"
    num_threads: int | None = None  # torch CPU threads; None = every core this process may use
    # Intra-op threads per step (engine/step_threads.py): "auto" profiles real steps at start-up on the model
    # thread (about a second) and runs each step size on its fastest count up to `num_threads` (a tiny model's
    # decode steps can be faster on one thread, its long prefill chunks on all); None or "off": every step
    # runs on `num_threads`
    step_threads: str | None = None
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_bytes: int | None = None
    kv_cache_fraction: float = 0.5
    kv_cache_max_bytes: int = 2 << 30
    max_num_seqs: int = 64  # sequences in one step
    max_num_batched_tokens: int = 1024  # token budget of one step (prefill chunks + decodes)
    max_model_len: int | None = None  # default: the model's context length
    enable_prefix_caching: bool = True
    release_window_blocks: bool = True  # sliding-window caches (DeepSeek-V4) give back blocks that slid out
    async_scheduling: bool = True  # overlap CPU scheduling/post-processing with the model step
    max_waiting_requests: int = 4096  # AsyncLLM: more queued requests raise QueueFullError
    kv_host_bytes: int | None = None  # L2 host tier budget; None = off
    kv_dir: str | None = None  # L3 directory tier; None = off
    kv_disk_bytes: int | None = None  # L3 byte budget (LRU); None = unbounded
    kv_retention: Any = None  # retention classes: Mapping[str, str | float] or Iterable["CLASS=DURATION"]
    # Sliding-window session cache (DeepSeek-V4, `engine/session_cache.py`): host bytes; None = off
    swa_session_bytes: int | None = None
    swa_session_ttl: float = 180.0  # idle seconds before a session's window state expires
    swa_session_grain: int = 128  # window state is kept at multiples of this many tokens
    swa_replay: bool = True  # on a window miss, replay only the last tokens before the boundary
    swa_replay_margin: int | None = None  # replay sliding_window + margin tokens; None = the exact margin
    swa_persist_window: bool = True  # with the lower KV tiers, window state at each grain goes down too
    # Speed paths, each with its reference as the off switch (tests prove them equal):
    # "reference": one attention call per sequence, so a sequence's numerics never depend on what else is in
    # the batch; "batched": one padded call per layer for the decode rows (proven equal in tests to 1e-10 in
    # fp64, but fp32 rounding then varies with batch composition); "native": the decode rows in one native
    # kernel call per layer that reads K/V in place through the block tables, each row computed alone
    # (batch-independent numerics; fp32 only, else the reference), prefill spans as the reference.
    # None (default): "native" for a GGUF checkpoint (the fast path, below), else the model's own default,
    # "batched" for DeepSeek-V4 (a third of the reference's ops per decode step at batch 8, equal to transformers'
    # logits in tests), "reference" for every other model.
    attention_backend: str | None = None
    # "dtype": weights in `dtype`; "int8" / "int4": weight-only quantised linears on torch's kernels; "q8_0" /
    # "q4_1": GGUF's block formats on the native CPU kernels (engine/kernels; pure torch without a compiler),
    # re-quantised from the loaded weights; "gguf": a GGUF file's own blocks as stored (Q8_0, Q4_1, Q4_K, Q5_K,
    # Q6_K; engine/models/gguf_weights.py) with fp32 activations, so each product is x times exactly the file's
    # dequantised weights; "gguf_q8": the same blocks with activations rounded to Q8_0 blocks as llama.cpp rounds
    # them (integer block products; Q8_0/Q4_1 files then run the fused decode step).
    # "auto" (default): "gguf" for a GGUF checkpoint, else "dtype".
    weight_format: str = "auto"
    moe_backend: str = "grouped"  # "loop": one matmul pair per expert
    # "native": RMSNorm of fp32 rows in one native kernel call (engine/kernels); "auto" (default): "native" for a
    # GGUF checkpoint, else "torch"
    norm_backend: str = "auto"
    # The fast path is the default for a GGUF checkpoint ("smollm2" or a .gguf path): the file's own blocks,
    # native attention and norm, the fused decode step. `exact=True` is the reference for parity tests: every
    # speed option left unset takes its reference (weights dequantised to `dtype`, per-sequence attention, torch's
    # RMSNorm, the layered decode step); options given explicitly still win.
    exact: bool = False
    # "layers": each decoder layer's torch modules; "fused": a decode-only step of a Llama-family model, or any step
    # of at most 64 tokens (a speculative verify step, a short prefill), runs all layers in one native call
    # (engine/kernels/fused_llama.py; fp32 activations and KV, fp32/q8_0/q4_1 weights), else the layered path.
    # The default: SmolLM2 decode ran 1.8-2.5x as fast fused as layered at batch 1 (fp32 and q4_1) and 2.0-3.9x at
    # 8-64 sequences (fp32; README, engine rows), and a row's values do not depend on the rest of the batch;
    # "layers" is its off switch (tests prove the two equal)
    decode_backend: str = "auto"  # "auto": "fused", or "layers" with `exact`
    # "torch": every linear through F.linear; "few-rows": fp32 products of a few rows (a speculative verify
    # step, a small decode batch) weight-major, W @ x^T, which costs about one row's time where MKL's x @ W^T
    # costs 1.6-2.7x (engine/layers/few_rows_linear.py)
    linear_backend: str = "torch"
    # CPU weights in transparent huge pages (engine/huge_pages.py): the large tensors are copied once, in layer
    # order, into one 2 MiB-aligned mapping advised MADV_HUGEPAGE (same values; fewer page walks and prefetcher
    # restarts when a decode step streams every weight); False keeps them where loading put them
    huge_pages: bool = True
    # Expert parallelism (engine/expert_parallel): N rank processes, routed experts sharded, attention
    # data-parallel; 1 = off. EPLB: every `eplb_interval_steps` steps (None = off) the ranks rebalance the
    # expert placement from the loads they recorded, with `eplb_redundant_experts` extra replicas.
    expert_parallel_size: int = 1
    eplb_interval_steps: int | None = None
    eplb_redundant_experts: int = 0
    # Speculative decoding (engine/speculative): None = off; "ngram", "draft-head" or "mtp". Draft tokens per
    # step: an int, or "auto" (per sequence and step, from the drafter's confidences and the step cost model,
    # which is read from `speculative_cost_model` (a JSON file) or else profiled at start-up).
    speculative: str | None = None
    num_speculative_tokens: int | str = "auto"
    speculative_cost_model: str | None = None
    # how the profiled step cost predicts steps it did not measure (engine/speculative/cost_model.py): "convex"
    # interpolates the measured steps fitted convex in tokens per batch size; "grid" fitted non-decreasing (the
    # earlier fit); "plane" is a least-squares plane over seqs and tokens
    speculative_cost_fit: str = "convex"
    # "auto" learns each measured step's cost (per sequences and tokens, relative to the running correction) from
    # the steps it runs, plain decode steps included, and uses it over the start-up profile's
    # (engine/speculative/cost_model.py); False: one running correction over the profile (the earlier model)
    speculative_cost_cells: bool = True
    # with `speculative_cost_cells`: a batch size's learned times are fitted again as the profile was ("convex":
    # convex, "grid": non-decreasing in tokens), weighted by their observations, the profile's points the prior of
    # the shape; False: the cells' own factors, interpolated between them
    speculative_cost_cells_fit: bool = True
    # "draft-head": "reduced" drafts from the head's frequency-ranked vocabulary where its weights have one
    # (engine/speculative/draft_head.py), "full" from the target's whole vocabulary
    speculative_draft_vocab: str = "reduced"
    # "draft-head": "q8_0" drafts with Q8_0 copies of the head and its vocabulary's LM-head rows, one native call a
    # position (SmolLM2: ~1.7 ms a draft position as fp32 modules, ~0.6 ms so on this CPU; drafts may differ by
    # rounding, outputs never do), "fp32" the weights as
    # loaded
    speculative_draft_head_weights: str = "q8_0"
    # with `async_scheduling`: steps that verify no draft (every sequence at k = 0, as while "auto" has paused
    # drafting) overlap the next step's scheduling like plain decode steps; False: every step of a speculative
    # engine waits for its predecessor (the reference)
    speculative_async: bool = True
    # the drafter calibrates on the verdicts of every proposal, read off the tokens then emitted (a draft token is
    # accepted iff it equals the emitted one): also the positions "auto" did not verify (k = 0, a short k);
    # False: only on the verified prefix, as verification settles it (engine/speculative/verdicts.py)
    speculative_unverified_verdicts: bool = True
    # "auto" pauses drafting while its first draft tokens hit less often than they pay for: the hit rate is a
    # running mean over about this many drafts (engine/speculative/hit_rate.py), and drafting pauses below
    # `speculative_pause_margin` times break-even and resumes at break-even. 5 and 1.0: about the earlier
    # policy, which at a true hit rate 1.6x break-even paused 70% of the steps (noise; 18% with 24 and 0.6)
    speculative_hit_window: int = 24
    speculative_pause_margin: float = 0.6
    # "draft-head": a calibration bin's verdicts counted offline (the shipped head's held-out text) weigh at most
    # as much as this many of the run's own (engine/speculative/calibration.py); None: all of them
    speculative_offline_weight: float | None = 20.0
    # "auto" prices the drafter's own time (seconds per chained position, per batch size, measured online): the
    # draft head / MTP chain stops where its next position no longer pays for itself, and the length policy's
    # rate counts the drafting time spent (engine/speculative/chain_budget.py); False: the earlier policy (the
    # chain runs while any row is above the first token's break-even survival, verification priced alone)
    speculative_price_drafting: bool = True
    # "ngram": continue after the latest occurrence of the suffix, through the draft's own tokens past the
    # sequence's end, so a longer draft limit never changes a draft's first tokens (engine/speculative/ngram.py);
    # False: the latest occurrence followed by a whole draft, else the earliest (the earlier lookup)
    speculative_ngram_extend: bool = True
    # "ngram": calibrate confidences per bucket of how far back the draft's occurrence matches (n below 8 tokens,
    # then 8/16/32: a long copy is accepted far more often than a chance 4-gram); False: per matched n alone
    speculative_ngram_match_buckets: bool = True

    def __post_init__(self) -> None:
        fast = is_gguf_checkpoint(self.model) and not self.exact
        if self.weight_format == "auto":
            self.weight_format = "gguf" if fast else "dtype"
        if self.norm_backend == "auto":
            self.norm_backend = "native" if fast else "torch"
        if self.attention_backend is None:
            self.attention_backend = "native" if fast else ("reference" if self.exact else None)
        if self.decode_backend == "auto":
            self.decode_backend = "layers" if self.exact else "fused"
        checks = [
            (self.block_size >= 1 and (self.block_size & (self.block_size - 1)) == 0,
             f"block_size must be a power of two, got {self.block_size}"),
            (self.num_kv_blocks is None or self.num_kv_blocks >= 1, "num_kv_blocks must be >= 1"),
            (self.kv_cache_bytes is None or self.kv_cache_bytes > 0, "kv_cache_bytes must be > 0"),
            (0.0 < self.kv_cache_fraction <= 1.0, "kv_cache_fraction must be in (0, 1]"),
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.max_model_len is None or self.max_model_len >= 1, "max_model_len must be >= 1"),
            (self.max_waiting_requests >= 1, "max_waiting_requests must be >= 1"),
            (self.num_threads is None or self.num_threads >= 1, "num_threads must be >= 1"),
            (self.step_threads in (None, "auto", "off"),
             f"step_threads must be 'auto', 'off' or None, got {self.step_threads!r}"),
            (self.kv_host_bytes is None or self.kv_host_bytes > 0, "kv_host_bytes must be > 0"),
            (self.kv_disk_bytes is None or self.kv_disk_bytes > 0, "kv_disk_bytes must be > 0"),
            (self.kv_disk_bytes is None or self.kv_dir is not None, "kv_disk_bytes needs kv_dir"),
            (not self.kv_tiers_enabled or self.enable_prefix_caching,
             "the lower KV tiers (kv_host_bytes, kv_dir) need enable_prefix_caching"),
            (self.swa_session_bytes is None or self.swa_session_bytes > 0, "swa_session_bytes must be > 0"),
            (self.swa_session_ttl > 0, "swa_session_ttl must be > 0"),
            (self.swa_session_grain >= 1 and self.swa_session_grain % self.block_size == 0,
             f"swa_session_grain must be a multiple of block_size ({self.block_size})"),
            (self.swa_replay_margin is None or self.swa_replay_margin >= 0, "swa_replay_margin must be >= 0"),
            (self.swa_session_bytes is None or self.enable_prefix_caching,
             "the sliding-window session cache (swa_session_bytes) needs enable_prefix_caching"),
            (self.attention_backend in (None, "batched", "native", "reference"),
             f"attention_backend must be 'batched', 'native', 'reference' or None, got {self.attention_backend!r}"),
            (self.weight_format in WEIGHT_FORMATS,
             f"weight_format must be one of {', '.join(map(repr, WEIGHT_FORMATS))}, got {self.weight_format!r}"),
            (self.norm_backend in ("native", "torch"), f"norm_backend must be 'native' or 'torch', got {self.norm_backend!r}"),
            (self.linear_backend in ("torch", "few-rows"),
             f"linear_backend must be 'torch' or 'few-rows', got {self.linear_backend!r}"),
            (self.decode_backend in ("layers", "fused"),
             f"decode_backend must be 'layers' or 'fused', got {self.decode_backend!r}"),
            (self.expert_parallel_size >= 1, "expert_parallel_size must be >= 1"),
            (self.eplb_interval_steps is None or self.eplb_interval_steps >= 1, "eplb_interval_steps must be >= 1"),
            (self.eplb_redundant_experts >= 0, "eplb_redundant_experts must be >= 0"),
            (self.moe_backend in ("grouped", "loop"), f"moe_backend must be 'grouped' or 'loop', got {self.moe_backend!r}"),
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
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.kv_retention = retention_seconds(self.kv_retention)

    @property
    def compute_path(self) -> str:
        """One line naming the path a step runs (`recipe serve` prints it at start-up)."""
        weights = {"gguf": "the GGUF file's own quantised blocks, fp32 activations (native kernels)",
                   "gguf_q8": "the GGUF file's own quantised blocks, Q8_0-rounded activations (native kernels)",
                   "dtype": f"{self.dtype} weights",
                   "q8_0": "weights re-quantised to q8_0 (native kernels)",
                   "q4_1": "weights re-quantised to q4_1 (native kernels)"}.get(str(self.weight_format),
                                                                               f"{self.weight_format} weights")
        kind = ("exact reference path" if self.exact
                else "fast path" if str(self.weight_format).startswith("gguf") else "path")
        attention = self.attention_backend or "model default"
        return (f"{kind}: {weights}, {attention} attention, {self.norm_backend} RMSNorm, "
                f"{self.decode_backend} decode step")

    @property
    def kv_tiers_enabled(self) -> bool:
        return self.kv_host_bytes is not None or self.kv_dir is not None

    @classmethod
    def from_kwargs(cls, model: str, **config: object) -> EngineConfig:
        """Build from keyword arguments, naming any unknown key instead of failing obscurely."""
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(config) - known)
        if unknown:
            raise TypeError(f"unknown engine config option(s) {unknown}; known: {sorted(known - {'model'})}")
        return cls(model=model, **config)  # type: ignore[arg-type]


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
