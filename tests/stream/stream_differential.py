"""Adversarial differential cases: Recipe's chain against the official reference, event by event.

A case is a request body (Chat, Messages or Responses), a model output built to stress the parser
(thinking, DSML tool calls well formed or broken or of the other model version, JSON with prose and
fences, special tokens, multi-byte characters, stop strings that overlap markup) and a backend update
sequence (text split at any granularity, or token ids in groups of any size, optionally with logprobs
whose alternatives are random vocabulary ids).

Ours is `recipe.codec.convert` → `recipe.stream.StreamProcessor`; the reference is `deepseek_recipe`'s
own conversion → its `StreamProcessor`. `compare(case)` returns None when every event and the complete
response are equal (tool-call ids and timestamps normalised), else a short description of the first
difference.
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

WORDS = ["Paris", "weather", "is", "sunny", "the", "a", "résumé", "中文", "数据", "🙂", "x=1", "{k}", "<b>", "\"q\"",
         "back\\slash", "tab\there", "ok", "END", "STOP", "think", "</thi", "<｜DS", "##", "`code`", "  ", "—", "}",
         "[1]", "ஂ்", "𝔘𝔫", "é", "ﬀ", "</", "｜", "<", "```", "\\u00e9", "\"", "\u200b", "Ω≈ç√"]
SPECIALS = ["<｜end▁of▁sentence｜>", "<｜User｜>", "<think>", "</think>", "<｜ref｜>", "<｜Assistant｜>"]
TOOL_NAMES = ["get_weather", "search", "calc", "lookup_user"]
STOPS = ["END", "STOP", "\n\n", "sunny", "中文", "x=", "</", "｜", "<｜", "think>", "}", "```", "DSML", "\"", "\n",
         "</think>", "<｜DSML｜", "invoke", "Paris", "{", "a", "🙂", "é", "json", " "]
MODELS = ["DeepSeek-V4-Pro", "DeepSeek-V4.1-Flash"]
UNSUPPORTED_MODEL = "DeepSeek-V4-Flash"  # a name both sides must reject the same way

_CALL_ID = re.compile(r"call_(\d\d)_[A-Za-z0-9_-]{20,40}")
_TIME_KEYS = {"created", "created_at", "completed_at"}


def words(rng: random.Random, lo: int, hi: int) -> str:
    parts = []
    for _ in range(rng.randint(lo, hi)):
        parts.append(rng.choice(WORDS))
        parts.append(rng.choice([" ", " ", " ", "\n", ", ", ". ", "\n\n", ""]))
    return "".join(parts).strip(" ")


# ---- DSML markup, well formed or not ----------------------------------------------------------------


def _tags(v41: bool) -> tuple[str, str]:
    """(prefix of an opening tag, block name) of one model version's DSML."""
    return ("<｜DSML｜ " if v41 else "<｜DSML｜"), ("calls" if v41 else "tool_calls")


def dsml_block(rng: random.Random, v41: bool, n: int, opened: bool = True, broken: bool = True) -> str:
    """A DSML tool-call block of `n` invokes; if `broken`, with some probability broken in one of many ways."""
    b = 1.0 if broken else 0.0
    mixed = rng.random() < 0.1 * b  # tags of both versions inside one block
    parts: list[str] = []

    def tag(name: str, attrs: str = "", closing: bool = False) -> str:
        version = (rng.random() < 0.5) if mixed else v41
        sp = " " if version else ""
        return f"<{'/' if closing else ''}｜DSML｜{sp}{name}{attrs}>"

    block = "calls" if v41 else "tool_calls"
    if opened:
        parts.append(tag(block) + rng.choice(["\n", "\n", "", " ", "\n\n"]))
    for _ in range(n):
        name = rng.choice([*TOOL_NAMES, "", "we ird", 'x"y']) if rng.random() < 0.1 * b else rng.choice(TOOL_NAMES)
        if rng.random() < 0.05 * b:
            parts.append(tag("invoke", rng.choice([" nam=\"x\"", "", " name=x"])))
        else:
            parts.append(tag("invoke", f' name="{name}"'))
        parts.append(rng.choice(["\n", "\n", "", " "]))
        for k in range(rng.randint(0, 3)):
            key = rng.choice(["city", "days", "q", "opts", "note", "k\"ey", "中"]) + (str(k) if rng.random() < 0.3 else "")
            string = rng.random() < 0.6
            if string:
                val = words(rng, 0, 4)
                if rng.random() < 0.8:
                    val = val.replace("<｜DS", "<x").replace("</", "< /")
            else:
                val = rng.choice(["2", "1e20", "-0.5", "true", "null", '{"a": [1, 2]}', "[1, \"<\"]", '"</x"',
                                  '{"s": "a</b"}', "", "nope", '"\\"<｜"'])
            attr = rng.choice([' string="true"', ' string="false"', "", ' string="maybe"', ' string="true" x="1"'])
            if string and rng.random() < 1 - 0.15 * b:
                attr = ' string="true"'
            elif not string and rng.random() < 1 - 0.15 * b:
                attr = ' string="false"'
            parts.append(tag("parameter", f' name="{key}"{attr}') + val + tag("parameter", closing=True))
            parts.append(rng.choice(["\n", "\n", "", " ", "\n\n"]))
        if rng.random() < 0.1 * b:
            parts.append(tag(rng.choice(["note", "foo", "parameter"])) + "stray" + tag("foo", closing=True))
        parts.append(tag("invoke", closing=True) + rng.choice(["\n", "\n", "", " "]))
    parts.append(tag(block, closing=True))
    if rng.random() < 0.25 * b:  # stray text between tags
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(parts) + 1)
            parts.insert(i, rng.choice([words(rng, 1, 3), "<", "</", "<｜", "｜DSML｜", ">", "\"", "<b>", "</x>"]))
    text = "".join(parts)
    if rng.random() < 0.2 * b:  # cut short
        text = text[: rng.randint(0, len(text))]
    return text


# ---- JSON answers -----------------------------------------------------------------------------------


def json_answer(rng: random.Random) -> str:
    value = rng.choice([
        {"city": "Paris", "temp": [21, 22.5], "s": "a}b"},
        {"a": "```", "b": "\n```\n"},
        [1, {"x": "</think>"}, "｜"],
        {"q": "\"quoted\" and \\ back", "u": "中文🙂"},
        {"dsml": "<｜DSML｜tool_calls>"},
        {},
    ])
    text = json.dumps(value, ensure_ascii=rng.random() < 0.3, indent=rng.choice([None, None, 2]))
    if rng.random() < 0.1:
        text = text[: rng.randint(0, len(text))]  # unbalanced
    lead = rng.choice(["", "Sure: ", "Here:\n```json\n", "```json\n", "```\n", "``", "`json\n", "Text {", "\n\n"])
    tail = rng.choice(["", "\n```", "\n```\nDone.", " thanks", "\n``", "```", "\n```json\n{}", " {\"more\": 1}"])
    return lead + text + tail


# ---- cases ------------------------------------------------------------------------------------------


def make_case(rng: random.Random, i: int, broken: bool = True, api: str | None = None) -> dict[str, Any]:
    """One random case; `broken=False` keeps DSML well formed and of the model's own version; `api`
    fixes the API (drawn otherwise)."""
    api = api or rng.choice(["chat", "messages", "responses"])
    model = UNSUPPORTED_MODEL if rng.random() < 0.03 else rng.choice(MODELS)
    v41 = "4.1" in model
    thinking = rng.random() < 0.5
    tools = rng.random() < 0.55
    choice = rng.choice(["auto", "auto", "required", "named", "none"]) if tools else None
    json_mode = rng.choice([None, None, "json_object", "json_object", "json_schema"])
    body: dict[str, Any] = {"model": model, "stream": True}
    user = "Weather in Paris? Answer in JSON." if json_mode else "Weather in Paris?"
    if api == "responses":
        body["input"] = user
        if not thinking:
            body["reasoning"] = {"effort": "none"}
        if rng.random() < 0.3:
            body["instructions"] = "Be brief."
    else:
        body["messages"] = [{"role": "user", "content": user}]
        if not thinking:
            body["thinking"] = {"type": "disabled"}
        if api == "messages":
            body["max_tokens"] = 1000
        elif rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    params = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
    if tools:
        if api == "chat":
            body["tools"] = [{"type": "function", "function": {"name": n, "parameters": params}} for n in TOOL_NAMES]
        elif api == "messages":
            body["tools"] = [{"name": n, "input_schema": params} for n in TOOL_NAMES]
        else:
            body["tools"] = [{"type": "function", "name": n, "parameters": params} for n in TOOL_NAMES]
        named = rng.choice(TOOL_NAMES)
        if choice == "required":
            body["tool_choice"] = {"chat": "required", "messages": {"type": "any"}, "responses": "required"}[api]
        elif choice == "named":
            body["tool_choice"] = {"chat": {"type": "function", "function": {"name": named}},
                                   "messages": {"type": "tool", "name": named},
                                   "responses": {"type": "function", "name": named}}[api]
        elif choice == "none":
            body["tool_choice"] = {"type": "none"} if api == "messages" else "none"
    if json_mode and api != "messages":
        schema = {"type": "object", "properties": {"city": {"type": "string"}}}
        if api == "chat":
            body["response_format"] = {"type": "json_object"} if json_mode == "json_object" else \
                {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}
        else:
            body["text"] = {"format": {"type": "json_object"} if json_mode == "json_object" else
                            {"type": "json_schema", "name": "w", "schema": schema}}
    stop: list[str] = []
    if api != "responses" and rng.random() < 0.45:
        stop = rng.sample(STOPS, rng.randint(1, 3))
        body["stop_sequences" if api == "messages" else "stop"] = stop
    if api == "chat" and rng.random() < 0.2:
        body["logprobs"] = True
        body["top_logprobs"] = rng.randint(0, 3)
    if api != "responses" and rng.random() < 0.08:
        # prefix continuation of the answer or of the reasoning
        reasoning = thinking and rng.random() < 0.5
        msg: dict[str, Any] = {"role": "assistant", "content": "" if reasoning else "It is"}
        if api == "chat":
            msg["prefix"] = True
            if reasoning:
                msg["reasoning_content"] = "The user asks"
        elif reasoning:
            msg["content"] = [{"type": "thinking", "thinking": "The user asks", "signature": "s"}]
        body["messages"].append(msg)
    text = make_output(rng, v41=v41, thinking=thinking, tools=tools, required=choice in ("required", "named"),
                       json_mode=json_mode is not None, stop=stop, broken=broken)
    finish = rng.choice(["stop"] * 6 + ["length", "content_filter"])
    feed = rng.choice(["text", "tokens"])
    return {"case_id": i, "api": api, "body": body, "output": text, "finish": finish, "feed": feed,
            "split_seed": rng.randrange(1 << 30), "logprobs": feed == "tokens" and rng.random() < 0.4,
            "explicit_finish": rng.random() < 0.85, "prompt_tokens": rng.randint(5, 500), "cached": rng.randint(0, 5)}


def make_output(rng: random.Random, *, v41: bool, thinking: bool, tools: bool, required: bool, json_mode: bool,
                stop: list[str], broken: bool = True) -> str:
    """A model output mixing the shapes the parser must survive."""
    other = broken and rng.random() < 0.2  # DSML of the other model version
    parts: list[str] = []
    if required and rng.random() < 0.6:
        # output continues inside the block the prompt opened (or opens with free text instead)
        if broken and rng.random() < 0.3:
            parts.append(words(rng, 1, 5) + rng.choice(["", "\n"]))
        block = dsml_block(rng, v41 != other, rng.randint(1, 2), opened=broken and rng.random() < 0.3, broken=broken)
        parts.append(block)
        parts.append(rng.choice(["", "", "\ntail", words(rng, 1, 3)]))
        return "".join(parts)
    if thinking and rng.random() < 0.9:
        parts.append(rng.choice(["", "\n", "\n\n"]) + words(rng, 0, 10) + rng.choice(["", "\n", "\n\n"]))
        if rng.random() < 0.2:
            parts.append(dsml_block(rng, v41 != other, 1, broken=broken))
        if rng.random() < 0.92:
            parts.append("</think>" + rng.choice(["", "\n", "\n\n"]))
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if json_mode and r < 0.5:
            parts.append(json_answer(rng))
        elif r < 0.75 or not tools:
            parts.append(words(rng, 0, 12))
        else:
            parts.append(rng.choice(["", "\n", "\n\n"]) + dsml_block(rng, v41 != other, rng.randint(1, 3), broken=broken))
    if tools and rng.random() < 0.3 and not any("DSML" in p for p in parts):
        parts.append(rng.choice(["", "\n\n"]) + dsml_block(rng, v41 != other, rng.randint(1, 2), broken=broken))
    text = "".join(parts)
    # well-formed markup stays whole: insertions go before it
    limit = len(text) if broken or "<｜DSML｜" not in text else text.index("<｜DSML｜")
    for _ in range(rng.randint(0, 2)):
        if rng.random() < 0.35:
            pos = rng.randint(0, limit)
            text = text[:pos] + rng.choice(SPECIALS) + text[pos:]
            limit = len(text) if broken or "<｜DSML｜" not in text else text.index("<｜DSML｜")
    if stop and rng.random() < 0.7:
        pos = rng.randint(0, limit)
        text = text[:pos] + rng.choice(stop) + text[pos:]
    return text


def updates(case: dict[str, Any], tokenizer: Any) -> list[dict[str, Any]]:
    """The backend update sequence of a case: text or token-id updates of random sizes."""
    rng = random.Random(case["split_seed"])
    out: list[dict[str, Any]] = [{"kind": "ready", "prompt_tokens": case["prompt_tokens"], "cached": case["cached"]}]
    text = case["output"]
    style = rng.choice(["ones", "small", "mixed", "large", "whole"])
    sizes = {"ones": [1], "small": [1, 2, 3], "mixed": [1, 1, 2, 3, 4, 6, 8, 16], "large": [5, 17, 40, 100],
             "whole": [1 << 30]}[style]
    if case["feed"] == "text":
        pos = 0
        while pos < len(text):
            n = rng.choice(sizes) if style != "mixed" or rng.random() < 0.9 else rng.randint(1, len(text))
            out.append({"kind": "text", "text": text[pos : pos + n], "token_count": rng.randint(0, 2)})
            pos += n
    else:
        ids = tokenizer.full.encode(text, add_special_tokens=False).ids
        vocab = tokenizer.full.get_vocab_size()
        pos = 0
        while pos < len(ids):
            n = rng.choice(sizes)
            group = ids[pos : pos + n]
            upd: dict[str, Any] = {"kind": "tokens", "ids": group}
            if case["logprobs"]:
                upd["logprobs"] = [[round(-rng.random() * 3, 4), _top(rng, tid, vocab, ids)] for tid in group]
            out.append(upd)
            pos += n
    if case["explicit_finish"]:
        out.append({"kind": "finish", "reason": case["finish"]})
    return out


def _top(rng: random.Random, tid: int, vocab: int, ids: list[int]) -> list[list[Any]]:
    top: list[list[Any]] = []
    for _ in range(rng.randint(0, 4)):
        alt = rng.choice([tid, rng.randrange(vocab), rng.randrange(vocab), rng.choice(ids), rng.randrange(128000)])
        top.append([alt, round(-rng.random() * 5, 4)])
    return top


# ---- running both sides ----------------------------------------------------------------------------


def run_reference(case: dict[str, Any], upds: list[dict[str, Any]], ref_tokenizer: Any) -> dict[str, Any]:
    """The reference's events and accumulated body; `error` is set when it rejected the request or stream."""
    import deepseek_recipe as dr

    req_cls = {"chat": dr.ChatCompletionRequest, "messages": dr.MessagesRequest,
               "responses": dr.ResponsesRequest}[case["api"]]
    try:
        req = req_cls(case["body"])
        echo = req.echo() if case["api"] == "responses" else None
        cr = req.convert(dr.ConversionOptions())
    except Exception as exc:
        return {"error": f"request: {exc}"}
    gen = req_cls.chunk_generator(cr, "resp-1", case["body"]["model"])
    if echo is not None:
        gen = gen.with_echo(echo)
    proc = dr.StreamProcessor(gen, cr.parsing_options, ref_tokenizer)
    reasons = {"stop": dr.InferenceFinishReason.Stop, "length": dr.InferenceFinishReason.Length,
               "content_filter": dr.InferenceFinishReason.ContentFilter}
    out: list[Any] = []
    try:
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
    except RuntimeError as exc:
        return {"error": f"stream: {exc}"}
    proc.close()
    resp_cls = {"chat": dr.ChatCompletionResponse, "messages": dr.MessagesResponse,
                "responses": dr.ResponsesResponse}[case["api"]]
    acc = resp_cls("resp-1", case["body"]["model"], 1700000000, case["prompt_tokens"], case["cached"])
    events = []
    for item in out:
        events.append({"event": resp_cls.sse_event_name(item), "data": json.loads(item.to_json())})
        acc.accumulate(item)
    return {"events": events, "response": json.loads(acc.to_json()), "done": resp_cls.sse_done_data() is not None}


def to_update(u: dict[str, Any]) -> Any:
    """The backend update a case's update record stands for."""
    from recipe.stream import Finish, Ready, TextUpdate, TokenLogprob, TokenUpdate

    kind = u["kind"]
    if kind == "ready":
        return Ready(prompt_tokens=u["prompt_tokens"], cached_tokens=u["cached"])
    if kind == "text":
        return TextUpdate(u["text"], u["token_count"])
    if kind == "tokens":
        lps = None
        if "logprobs" in u:
            lps = [TokenLogprob(lp, [(int(t), float(v)) for t, v in top]) for lp, top in u["logprobs"]]
        return TokenUpdate(u["ids"], lps)
    return Finish(u["reason"])


def run_ours(case: dict[str, Any], upds: list[dict[str, Any]], tokenizer: Any) -> dict[str, Any]:
    """Recipe's chain: `recipe.codec.convert` → `StreamProcessor`."""
    from recipe.codec import ConversionOptions, convert
    from recipe.conversation import ModelVersion
    from recipe.errors import RequestError
    from recipe.stream import StreamInputError, StreamProcessor, responses_echo

    api = case["api"]
    try:
        request = convert(api, case["body"], ConversionOptions(strict_reference=True))
    except RequestError as exc:
        return {"error": f"request: {exc}"}
    fmt = "deepseek_v41" if request.model_version is ModelVersion.V41 else "deepseek_v4"
    echo = responses_echo(case["body"]) if api == "responses" else None
    proc = StreamProcessor(api, request, response_id="resp-1", model=case["body"]["model"], tokenizer=tokenizer,
                           output_format=fmt, created=1700000000, echo=echo)
    events: list[Any] = []
    try:
        for u in upds:
            events += proc.feed(to_update(u))
            if proc.finished:
                break
        events += proc.finish()
    except StreamInputError as exc:
        return {"error": f"stream: {exc}"}
    return {"events": [{"event": e.name, "data": e.data} for e in events if not e.done],
            "response": proc.response(), "done": bool(events) and events[-1].done}


def normalise(value: Any) -> Any:
    """Replace tool-call ids' random part and timestamps so runs compare equal."""
    if isinstance(value, dict):
        return {k: (0 if k in _TIME_KEYS and isinstance(v, int) else normalise(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        return _CALL_ID.sub(lambda m: f"call_{m.group(1)}_X", value)
    return value


def explicit_updates(case: dict[str, Any], chunks: list[str] | int | None, tokenizer: Any) -> list[dict[str, Any]]:
    """Updates that feed `case["output"]` in the given text chunks (or token groups of `chunks` ids)."""
    out: list[dict[str, Any]] = [{"kind": "ready", "prompt_tokens": case["prompt_tokens"], "cached": case["cached"]}]
    text = case["output"]
    if case["feed"] == "text":
        if chunks is None:
            chunks = [text]
        elif isinstance(chunks, int):
            chunks = [text[i : i + chunks] for i in range(0, len(text), chunks)]
        out += [{"kind": "text", "text": c, "token_count": 1} for c in chunks]
    else:
        ids = tokenizer.full.encode(text, add_special_tokens=False).ids
        size = chunks if isinstance(chunks, int) else max(len(ids), 1)
        out += [{"kind": "tokens", "ids": ids[i : i + size]} for i in range(0, len(ids), size)]
    out.append({"kind": "finish", "reason": case["finish"]})
    return out


def compare(case: dict[str, Any], tokenizer: Any, ref_tokenizer: Any) -> str | None:
    """None when both chains agree on `case`; else where they first differ."""
    return compare_updates(case, updates(case, tokenizer), tokenizer, ref_tokenizer)


def compare_updates(case: dict[str, Any], upds: list[dict[str, Any]], tokenizer: Any, ref_tokenizer: Any) -> str | None:
    """None when both chains agree on `case` fed `upds`; else where they first differ."""
    ref = run_reference(case, upds, ref_tokenizer)
    ours = run_ours(case, upds, tokenizer)
    if "error" in ref or "error" in ours:
        if ("error" in ref) != ("error" in ours) or ref["error"].split(":")[0] != ours["error"].split(":")[0]:
            return f"error: ours {ours.get('error')!r} reference {ref.get('error')!r}"
        return None
    a, b = normalise(ours["events"]), normalise(ref["events"])
    if a != b:
        k = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        return f"event {k} of {len(a)}/{len(b)}: ours {a[k] if k < len(a) else None} reference {b[k] if k < len(b) else None}"
    if normalise(ours["response"]) != normalise(ref["response"]):
        return "complete response differs"
    if case["api"] == "chat" and ours["done"] != ref["done"]:
        return "[DONE] differs"
    return None


def main() -> None:
    """Run fresh cases and print how many were event-identical (the failures' first differences too)."""
    import argparse

    import deepseek_recipe as dr

    from recipe.tokenizer import deepseek_v4_tokenizer_path, load_deepseek_v4_tokenizer

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one)")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--well-formed", action="store_true", help="well-formed DSML of the model's own version only")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 32)
    tokenizer = load_deepseek_v4_tokenizer()
    ref_tokenizer = dr.Tokenizer.from_file(str(deepseek_v4_tokenizer_path()))
    rng = random.Random(seed)
    failures = []
    for i in range(args.count):
        case = make_case(rng, i, broken=not args.well_formed)
        diff = compare(case, tokenizer, ref_tokenizer)
        if diff:
            failures.append((i, diff))
    kind = "well-formed" if args.well_formed else "broken-markup"
    print(f"seed {seed}: {args.count - len(failures)} of {args.count} fresh {kind} cases event-identical")
    for i, diff in failures[:5]:
        print(f"  case {i}: {diff[:300]}")


if __name__ == "__main__":
    main()
