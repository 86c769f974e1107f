"""`recipe generate`: run a batch file through the embedded engine, with a progress bar.

    recipe generate prompts.jsonl -o outputs.jsonl
    recipe generate --model path/to/checkpoint --temperature 0 --max-tokens 64 - < prompts.jsonl

Each input line is a JSON object with `prompt` (text, used as is: special-token spellings such as
`<|im_start|>` become their ids) or `prompt_ids` (token ids), an optional `id`, and optional sampling
fields overriding the command-line defaults: temperature, top_p, top_k, min_p, presence_penalty,
frequency_penalty, repetition_penalty, max_tokens, stop_token_ids, ignore_eos, seed, logprobs, n.
Each output line (one per prompt and choice, in input order) holds `id`, `index`, `output_ids`, `text`,
`finish_reason`, `prompt_tokens`, `cached_tokens`, `ttft_s` and, when asked, `logprobs`.
A bad line stops the run before any generation, naming the line (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson

SAMPLING_FIELDS = {
    "temperature": float, "top_p": float, "top_k": int, "min_p": float, "presence_penalty": float,
    "frequency_penalty": float, "repetition_penalty": float, "max_tokens": int, "stop_token_ids": tuple,
    "ignore_eos": bool, "seed": int, "logprobs": int, "n": int,
}


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("generate", help="generate completions for a JSONL batch with the embedded engine",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", nargs="?", default="-", help="input JSONL, or - for standard input (default)")
    p.add_argument("-o", "--output", default="-", help="output JSONL (default: standard output)")
    p.add_argument("--model", default="smollm2", help="model name, checkpoint folder or .gguf (default: smollm2)")
    p.add_argument("--dtype", default="float32", help="float32 or bfloat16 (default: float32)")
    p.add_argument("--device", default="cpu", help="cpu, cuda, npu ... (default: cpu)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: all cores)")
    p.add_argument("--step-threads", default="auto", choices=("auto", "off"),
                   help="intra-op threads per step: auto (default; a start-up profile of about a second, small "
                        "steps may run on fewer threads than --threads) or off (EngineConfig.step_threads)")
    p.add_argument("--max-num-seqs", type=int, default=64, help="sequences per step (default: 64)")
    p.add_argument("--max-num-batched-tokens", type=int, default=1024, help="tokens per step (default: 1024)")
    p.add_argument("--kv-cache-gib", type=float, default=None, help="KV cache size in GiB (default: from free memory)")
    p.add_argument("--no-prefix-caching", action="store_true", help="disable the prefix cache")
    p.add_argument("--sync", action="store_true", help="synchronous scheduling (no CPU/model overlap)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=-1)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--seed", type=int, default=None)
    p.set_defaults(func=run)


def _read_lines(path: str) -> list[bytes]:
    if path == "-":
        return sys.stdin.buffer.read().splitlines()
    with open(path, "rb") as fh:
        return fh.read().splitlines()


def parse_batch(lines: list[bytes], defaults: dict[str, Any]) -> list[tuple[str, str | list[int], Any]]:
    """(id, prompt text or ids, SamplingParams) per non-empty line; `ValueError` names the bad line."""
    from recipe.engine import SamplingParams

    items = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object")
            unknown = sorted(set(obj) - set(SAMPLING_FIELDS) - {"id", "prompt", "prompt_ids"})
            if unknown:
                raise ValueError(f"unknown field(s) {unknown}")
            if ("prompt" in obj) == ("prompt_ids" in obj):
                raise ValueError("give exactly one of 'prompt' (text) or 'prompt_ids' (token ids)")
            prompt: Any = obj.get("prompt", obj.get("prompt_ids"))
            if "prompt" in obj and not isinstance(prompt, str):
                raise ValueError("'prompt' must be a string")
            if "prompt_ids" in obj and not (isinstance(prompt, list) and all(type(t) is int for t in prompt)):
                raise ValueError("'prompt_ids' must be a list of integers")
            fields = dict(defaults)
            for key, kind in SAMPLING_FIELDS.items():
                if key in obj:
                    value = obj[key]
                    if kind is tuple:
                        if not (isinstance(value, list) and all(type(t) is int for t in value)):
                            raise ValueError(f"'{key}' must be a list of integers")
                        value = tuple(value)
                    elif kind is float and type(value) in (int, float):
                        value = float(value)
                    elif type(value) is not kind and not (value is None and key in ("seed", "logprobs")):
                        raise ValueError(f"'{key}' must be {kind.__name__}")
                    fields[key] = value
            params = SamplingParams(**fields)
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise ValueError(f"line {number}: {exc}") from None
        items.append((str(obj.get("id", number)), prompt, params))
    return items


def run(args: argparse.Namespace) -> int:
    defaults = {"temperature": args.temperature, "top_p": args.top_p, "top_k": args.top_k,
                "max_tokens": args.max_tokens, "seed": args.seed}
    try:
        items = parse_batch(_read_lines(args.file), defaults)
    except (OSError, ValueError) as exc:
        print(f"recipe generate: {exc}", file=sys.stderr)
        return 2
    from recipe.engine import LLM

    config: dict[str, Any] = {
        "dtype": args.dtype, "device": args.device, "num_threads": args.threads, "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens, "enable_prefix_caching": not args.no_prefix_caching,
        "async_scheduling": not args.sync, "step_threads": args.step_threads,
    }
    if args.kv_cache_gib is not None:
        config["kv_cache_bytes"] = int(args.kv_cache_gib * (1 << 30))
    try:
        llm = LLM(args.model, **config)
        prompts = [llm.encode(p) if isinstance(p, str) else p for _, p, _ in items]
        for (item_id, _, params), ids in zip(items, prompts, strict=True):
            try:
                llm.engine.validate(ids, params)
            except ValueError as exc:
                raise ValueError(f"request {item_id}: {exc}") from None
    except (ValueError, TypeError) as exc:
        print(f"recipe generate: {exc}", file=sys.stderr)
        return 2
    bar = None
    if not args.no_progress:
        from tqdm import tqdm

        bar = tqdm(total=sum(p.n for _, _, p in items), unit="seq", file=sys.stderr, desc="generate")

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.update(done - bar.n)

    outputs = llm.generate(prompts, [p for _, _, p in items], progress=progress)
    if bar is not None:
        bar.close()
    llm.shutdown()
    out = sys.stdout.buffer if args.output == "-" else open(args.output, "wb")  # noqa: SIM115
    try:
        cursor = 0
        for item_id, _, params in items:
            for _ in range(params.n):
                o = outputs[cursor]
                cursor += 1
                record: dict[str, Any] = {
                    "id": item_id, "index": o.index, "output_ids": list(o.new_token_ids), "text": o.text,
                    "finish_reason": o.finish_reason, "prompt_tokens": o.prompt_tokens,
                    "cached_tokens": o.cached_tokens, "ttft_s": o.timing.ttft,
                }
                if o.new_logprobs is not None:
                    record["logprobs"] = [None if lp is None else {"logprob": lp[0], "top": lp[1]}
                                          for lp in o.new_logprobs]
                out.write(orjson.dumps(record) + b"\n")
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    return 0
