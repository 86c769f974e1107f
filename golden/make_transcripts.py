"""Regenerate golden/transcripts/stream.jsonl.gz: reference stream transcripts for generated model outputs.

Each case is a request body (Chat, Messages or Responses), a backend update sequence (text updates, or
token-id updates of random granularity with the V4 tokenizer, optionally with logprobs) and what the
official `deepseek-recipe` stream processor produced for it: every event (SSE name + JSON data) and the
accumulated complete body. Run: `.venv/bin/python golden/make_transcripts.py [--count N] [--seed S]`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "transcripts" / "stream.jsonl.gz"

WORDS = ["Paris", "weather", "is", "sunny", "the", "a", "résumé", "中文", "数据", "🙂", "x=1", "{k}", "<b>", "\"q\"",
         "back\\slash", "tab\there", "ok", "END", "STOP", "think", "</thi", "<｜DS", "##", "`code`", "  ", "—"]
SPECIALS = ["<｜end▁of▁sentence｜>", "<｜User｜>", "<think>", "<｜ref｜>"]
TOOL_NAMES = ["get_weather", "search", "calc", "lookup_user"]


def words(rng: random.Random, lo: int, hi: int) -> str:
    parts = []
    for _ in range(rng.randint(lo, hi)):
        w = rng.choice(WORDS)
        parts.append(w)
        parts.append(rng.choice([" ", " ", " ", "\n", ", ", ". ", "\n\n"]))
    return "".join(parts).strip(" ")


def dsml_calls(rng: random.Random, v41: bool, n: int) -> str:
    sp = " " if v41 else ""
    block = "calls" if v41 else "tool_calls"
    out = [f"<｜DSML｜{sp}{block}>\n"]
    for _ in range(n):
        out.append(f'<｜DSML｜{sp}invoke name="{rng.choice(TOOL_NAMES)}">\n')
        for k in range(rng.randint(0, 3)):
            key = rng.choice(["city", "days", "q", "opts", "note"]) + (str(k) if rng.random() < 0.3 else "")
            if rng.random() < 0.6:
                val = words(rng, 1, 4).replace("<｜DS", "<x")
                out.append(f'<｜DSML｜{sp}parameter name="{key}" string="true">{val}</｜DSML｜{sp}parameter>\n')
            else:
                val = rng.choice(["2", "1e20", "-0.5", "true", "null", '{"a": [1, 2]}', "[1, \"<\"]"])
                out.append(f'<｜DSML｜{sp}parameter name="{key}" string="false">{val}</｜DSML｜{sp}parameter>\n')
        if v41 and rng.random() < 0.3:
            out.append("\n")
        out.append(f"</｜DSML｜{sp}invoke>\n")
    out.append(f"</｜DSML｜{sp}{block}>")
    return "".join(out)


def make_case(rng: random.Random, i: int) -> dict[str, Any]:
    api = ["chat", "messages", "responses"][i % 3]
    kind = rng.choice(["plain", "thinking", "tool", "tools", "stop", "stop_split", "length", "json", "special",
                       "prefix", "required"])
    v41 = rng.random() < 0.35
    model = "DeepSeek-V4.1-Flash" if v41 else "DeepSeek-V4-Pro"
    thinking = kind in ("thinking", "tool", "tools", "prefix") or (kind in ("special", "length") and rng.random() < 0.5)
    tools = (kind in ("tool", "tools", "required") or rng.random() < 0.15) and kind != "prefix"
    user = "Weather in Paris? Answer in JSON." if kind == "json" else "Weather in Paris?"
    body: dict[str, Any] = {"model": model, "stream": True}
    if api == "chat":
        body["messages"] = [{"role": "user", "content": user}]
        if not thinking:
            body["thinking"] = {"type": "disabled"}
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    elif api == "messages":
        body["messages"] = [{"role": "user", "content": user}]
        body["max_tokens"] = 1000
        if not thinking:
            body["thinking"] = {"type": "disabled"}
    else:
        body["input"] = user
        if not thinking:
            body["reasoning"] = {"effort": "none"}
        if rng.random() < 0.3:
            body["instructions"] = "Be brief."
        if rng.random() < 0.3:
            body["temperature"] = 0.5
    params = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    if tools:
        if api == "chat":
            body["tools"] = [{"type": "function", "function": {"name": n, "parameters": params}} for n in TOOL_NAMES]
        elif api == "messages":
            body["tools"] = [{"name": n, "input_schema": params} for n in TOOL_NAMES]
        else:
            body["tools"] = [{"type": "function", "name": n, "parameters": params} for n in TOOL_NAMES]
    prefix_reasoning = kind == "prefix" and rng.random() < 0.5
    if kind == "prefix" and api != "responses":
        # prefix continuation: the answer (or the reasoning) continues an assistant message
        msg: dict[str, Any] = {"role": "assistant", "content": "" if prefix_reasoning else "It is"}
        if api == "chat":
            msg["prefix"] = True
            if prefix_reasoning:
                msg["reasoning_content"] = "The user asks"
        else:
            msg["content"] = [{"type": "thinking", "thinking": "The user asks", "signature": "s"}] if prefix_reasoning \
                else "It is"
        body["messages"].append(msg)
    if kind == "required":
        body["tool_choice"] = {"chat": "required", "messages": {"type": "any"}, "responses": "required"}[api]
    stop: list[str] = []
    if kind in ("stop", "stop_split"):
        stop = rng.sample(["END", "STOP", "\n\n", "sunny", "中文", "x="], rng.randint(1, 2))
        key = "stop_sequences" if api == "messages" else "stop"
        if api != "responses":
            body[key] = stop
    if kind == "json":
        if api == "chat":
            body["response_format"] = {"type": "json_object"}
        elif api == "responses":
            body["text"] = {"format": {"type": "json_object"}}
    # model output
    text = ""
    if kind == "required":  # the prompt opened the tool-call block; output continues inside it
        block = dsml_calls(rng, v41, rng.randint(1, 2))
        text = block[block.index(">\n") + 2 :] + rng.choice(["", "\ntail"])
    elif kind == "prefix" and not prefix_reasoning and api != "responses":
        text = rng.choice(["", "\n", " "]) + words(rng, 1, 10)
    elif thinking:
        text += rng.choice(["", "\n", "\n\n"]) + words(rng, 0, 12) + rng.choice(["", "\n", "\n\n"]) + "</think>"
        text += rng.choice(["", "\n", "\n\n"])
    if kind == "required":
        pass
    elif kind == "json":
        value = json.dumps({"city": "Paris", "temp": [21, 22.5], "s": "a}b"}, ensure_ascii=False)
        text += rng.choice(["", "Sure: ", "Here:\n```json\n", "```json\n"]) + value
        text += rng.choice(["", "\n```", "\n```\nDone.", " thanks"])
    else:
        text += words(rng, 0 if kind in ("tool", "tools") else 1, 20)
    if kind == "special":
        pos = rng.randint(0, len(text))
        text = text[:pos] + rng.choice(SPECIALS) + text[pos:]
    if kind in ("stop", "stop_split") and stop and api != "responses":
        pos = rng.randint(0, len(text))
        text = text[:pos] + rng.choice(stop) + text[pos:] + " after " + words(rng, 1, 5)
    if kind != "required" and (kind in ("tool", "tools") or (tools and rng.random() < 0.5)):
        text += rng.choice(["", "\n\n", "\n"]) + dsml_calls(rng, v41 if rng.random() < 0.8 else not v41,
                                                           1 if kind != "tools" else rng.randint(2, 3))
        if rng.random() < 0.2:
            text += "trailing text"
    finish = "length" if kind == "length" else rng.choice(["stop"] * 8 + ["length", "content_filter"])
    use_tokens = rng.random() < 0.5
    return {"case_id": i, "api": api, "kind": kind, "body": body, "output": text, "finish": finish,
            "feed": "tokens" if use_tokens else "text", "split_seed": rng.randrange(1 << 30),
            "logprobs": use_tokens and rng.random() < 0.3, "explicit_finish": rng.random() < 0.9,
            "prompt_tokens": rng.randint(5, 500), "cached": rng.randint(0, 5)}


def updates(case: dict[str, Any], tokenizer: Any) -> list[dict[str, Any]]:
    """The backend update sequence of a case, as JSON-able dicts (shared by the reference run and the tests)."""
    rng = random.Random(case["split_seed"])
    out: list[dict[str, Any]] = [{"kind": "ready", "prompt_tokens": case["prompt_tokens"], "cached": case["cached"]}]
    text = case["output"]
    if case["feed"] == "text":
        pos = 0
        while pos < len(text):
            n = rng.choice([1, 1, 2, 3, 4, 6, 8, 16])
            out.append({"kind": "text", "text": text[pos : pos + n], "token_count": rng.randint(0, 2)})
            pos += n
    else:
        ids = tokenizer.full.encode(text, add_special_tokens=False).ids
        pos = 0
        while pos < len(ids):
            n = rng.choice([1, 1, 1, 2, 3, 4])
            group = ids[pos : pos + n]
            upd: dict[str, Any] = {"kind": "tokens", "ids": group}
            if case["logprobs"]:
                upd["logprobs"] = [[round(-rng.random() * 3, 4), [[tid, -0.125], [17, -2.5]]] for tid in group]
            out.append(upd)
            pos += n
    if case["explicit_finish"]:
        out.append({"kind": "finish", "reason": case["finish"]})
    return out


def run_reference(case: dict[str, Any], upds: list[dict[str, Any]], ref_tokenizer: Any) -> dict[str, Any]:
    import deepseek_recipe as dr

    req_cls = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest,
               "responses": dr.ResponsesRequest}[case["api"]]
    req = req_cls(case["body"])
    echo = req.echo() if case["api"] == "responses" else None
    cr = req.convert(dr.ConversionOptions())
    gen = req_cls.chunk_generator(cr, "resp-1", case["body"]["model"])
    if echo is not None:
        gen = gen.with_echo(echo)
    proc = dr.StreamProcessor(gen, cr.parsing_options, ref_tokenizer)
    reasons = {"stop": dr.InferenceFinishReason.Stop, "length": dr.InferenceFinishReason.Length,
               "content_filter": dr.InferenceFinishReason.ContentFilter}
    out: list[Any] = []
    for u in upds:
        if u["kind"] == "ready":
            chunk = dr.InferenceChunk.ready(prompt_usage=dr.PromptUsage(
                prompt_tokens=u["prompt_tokens"], prompt_cache_hit_tokens=u["cached"]))
        elif u["kind"] == "text":
            chunk = dr.InferenceChunk.text(u["text"], u["token_count"])
        elif u["kind"] == "tokens":
            lps = [(lp, [tuple(t) for t in top]) for lp, top in u["logprobs"]] if "logprobs" in u else None
            chunk = dr.InferenceChunk.tokens(u["ids"], lps)
        else:
            chunk = dr.InferenceChunk.finish(reasons[u["reason"]])
        out += proc.push(chunk)
        if proc.finished:
            break
    out += proc.finish()
    proc.close()
    resp_cls = {"chat": dr.ChatCompletionResponse, "messages": dr.MessagesResponse,
                "responses": dr.ResponsesResponse}[case["api"]]
    acc = resp_cls("resp-1", case["body"]["model"], 1700000000, case["prompt_tokens"], case["cached"])
    events = []
    for item in out:
        events.append({"event": resp_cls.sse_event_name(item), "data": json.loads(item.to_json())})
        acc.accumulate(item)
    return {"events": events, "response": json.loads(acc.to_json()), "done": resp_cls.sse_done_data() is not None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=360)
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args()
    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer

    tok = load_deepseek_v4_tokenizer()
    ref_tok = dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path()))
    rng = random.Random(args.seed)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    kinds: dict[str, int] = {}
    with gzip.open(OUT, "wt", encoding="utf-8") as fh:
        for i in range(args.count):
            case = make_case(rng, i)
            upds = updates(case, tok)
            case["updates"] = upds
            case["reference"] = run_reference(case, upds, ref_tok)
            kinds[case["kind"]] = kinds.get(case["kind"], 0) + 1
            fh.write(json.dumps(case, ensure_ascii=False) + "\n")
    print(f"wrote {args.count} cases to {OUT}: {kinds}")


if __name__ == "__main__":
    main()
