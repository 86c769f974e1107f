"""Golden vectors of the official reference and the view that compares Recipe's conversion with them."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from recipe.conversation import ConversationRequest, ImageSource, Message, ToolDefinition

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "requests.jsonl.gz"

# Where Recipe deliberately goes beyond the reference (documented in recipe/codec.py):
N_REJECTED = "Invalid n value (currently only n = 1 is supported)"


def load_golden() -> list[dict[str, Any]]:
    with gzip.open(GOLDEN, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _image(s: ImageSource) -> dict[str, Any]:
    return {
        "kind": s.kind,
        "detail": s.detail,
        "url": s.url,
        "data_url": s.data_url,
        "data": None if s.data is None else s.data.hex(),
        "path": s.path,
    }


def _tool(t: ToolDefinition) -> dict[str, Any]:
    return {
        "name": t.name,
        "description": t.description,
        "parameters": t.parameters,
        "strict": t.strict,
        "defer_loading": t.defer_loading,
    }


def _message(m: Message) -> dict[str, Any]:
    return {
        "role": m.role,
        "content": m.content,
        "reasoning_content": m.reasoning_content,
        "tool_calls": None
        if m.tool_calls is None
        else [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in m.tool_calls],
        "tool_call_id": m.tool_call_id,
        "image_sources": [_image(s) for s in m.image_sources],
        "prefix": m.prefix,
        "tools": None if m.tools is None else [_tool(t) for t in m.tools],
    }


def conversion_view(req: ConversationRequest) -> dict[str, Any]:
    """A converted request in the golden record's layout (the fields the reference exposes)."""
    c = req.conversation
    inf = req.inference_options
    par = req.parsing_options
    oc = inf.output_constraint
    return {
        "model_version": "V4" if req.model_version.value == "DeepseekV4Pro" else "V41",
        "stream": req.stream,
        "conversation": {
            "messages": [_message(m) for m in c.messages],
            "thinking_mode": c.thinking_mode,
            "tools": [_tool(t) for t in c.tools],
            "tool_choice": c.tool_choice,
            "reasoning_effort": c.reasoning_effort,
            "response_format": c.response_format,
            "response_schema": c.response_schema,
            "response_regex": c.response_regex,
        },
        "inference": {
            "max_tokens": inf.max_tokens,
            "temperature": inf.temperature,
            "top_p": inf.top_p,
            "logprobs": inf.logprobs,
            "top_logprobs": inf.top_logprobs,
            "seed": inf.seed,
            "output_constraint": None if oc is None else {"kind": oc.kind, "schema": oc.schema},
        },
        "parsing": {
            "parse_tool_calls": par.parse_tool_calls,
            "starts_in_tool_calls": par.starts_in_tool_calls,
            "parse_json_output": par.parse_json_output,
            "thinking_initial_stage": None if par.thinking_initial_stage is None else par.thinking_initial_stage.value,
            "stop_sequences": list(par.stop_sequences),
        },
    }


def golden_view(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: rec[k] for k in ("model_version", "stream", "conversation", "inference", "parsing")}


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """The path of the first difference between two JSON-like values (None if equal)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}.{k} (missing on one side)"
            d = first_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path} (length {len(a)} != {len(b)})"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return f"{path}: {a!r} != {b!r}"
    if a != b:
        return f"{path}: {a!r} != {b!r}"
    return None


@pytest.fixture(scope="session")
def golden() -> list[dict[str, Any]]:
    return load_golden()


__all__ = ["conversion_view", "first_difference", "golden_view", "load_golden", "replace"]


N_OURS = "Invalid n value, the valid range of n is [1, 16]"


def _strict() -> Any:
    from recipe.codec import ConversionOptions

    return ConversionOptions(strict_reference=True)


# The reference's behaviour, which every comparison with it runs under (the default also accepts what
# `recipe.protocols.leniency` lists; `lenient_agrees` checks it changes nothing else).
STRICT = _strict()


def lenient_triggers(api: str, text: str) -> list[str]:
    """The rules of `recipe.protocols.leniency` that a body (valid JSON) would meet; [] when none."""
    try:
        obj = json.loads(text)
    except ValueError:
        return []
    if not isinstance(obj, dict):
        return []
    found = []
    tools = bool(obj.get("tools"))
    choice = obj.get("tool_choice")
    messages = obj.get("messages") if isinstance(obj.get("messages"), list) else []
    if api == "chat":
        if obj.get("max_completion_tokens") is not None:
            found.append("max_completion_tokens")
        if any(isinstance(m, dict) and m.get("role") == "developer" for m in messages):
            found.append("developer")
        if tools and (choice == "required" or isinstance(choice, dict)):
            found.append("forced tool choice")
    elif api == "messages":
        if tools and isinstance(choice, dict) and choice.get("type") in ("tool", "any"):
            found.append("forced tool choice")
        if any(isinstance(m, dict) and isinstance(m.get("content"), list)
               and any(isinstance(b, dict) and b.get("type") == "redacted_thinking" for b in m["content"])
               for m in messages):
            found.append("redacted_thinking")
        config = obj.get("output_config")
        if (isinstance(config, dict) and config.get("format") is not None) or obj.get("output_format") is not None:
            found.append("output format")
    elif api == "responses":
        forced_dict = isinstance(choice, dict) and choice.get("type") in ("function", "custom")
        if tools and (choice == "required" or forced_dict):
            found.append("forced tool choice")
        customs = [t for t in obj.get("tools") or () if isinstance(t, dict) and t.get("type") == "custom"]
        if any(t.get("name") != "apply_patch" for t in customs):
            found.append("custom tool")
        if any(t.get("format") is not None and not (isinstance(t["format"], dict) and t["format"].get("type") == "text")
               for t in customs):
            found.append("custom tool format")
    return found


def expected_outcome(rec: dict[str, Any]) -> dict[str, Any]:
    """What Recipe must produce for a golden case: the reference's outcome, adjusted only for the
    documented divergence (Chat `n` in [2, 16] accepted as `InferenceOptions.n`; other `n` rejected
    with Recipe's own range message), and with an unanswered Responses call compared up to its id
    (the reference names one of several at random)."""
    beyond = rec.get("beyond_reference")
    if beyond is not None:
        e = beyond["expected"]
        if "error" in e:
            return {"error": e["error"]}
        view = golden_view(e)
        view["n"] = beyond["n"]
        return {"ok": view}
    if "error" in rec:
        err = dict(rec["error"])
        if err["message"] == N_REJECTED:
            err["message"] = N_OURS
        err["message"] = _unanswered(err["message"])
        return {"error": err}
    return {"ok": golden_view(rec)}


def actual_outcome(rec: dict[str, Any]) -> dict[str, Any]:
    """Recipe's outcome for a golden case, in the layout of `expected_outcome`."""
    from recipe.codec import convert
    from recipe.errors import RequestError

    try:
        req = convert(rec["api"], rec["request"], STRICT)
    except RequestError as exc:
        return {"error": {"status": exc.status, "message": _unanswered(exc.message), "kind": exc.kind}}
    view = conversion_view(req)
    if "beyond_reference" in rec:
        view["n"] = req.inference_options.n
    return {"ok": view}


@pytest.fixture(scope="session")
def outcomes() -> Any:
    """The comparison helpers (`actual`, `expected`, `diff`, `view`) for tests in this folder."""
    from types import SimpleNamespace

    return SimpleNamespace(
        actual=actual_outcome, expected=expected_outcome, diff=first_difference, view=conversion_view
    )


MAKE_VECTORS = Path(__file__).resolve().parents[2] / "golden" / "make_vectors.py"


@pytest.fixture(scope="session")
def make_vectors() -> Any:
    """`golden/make_vectors.py` as a module: the reference runner and the random body generators."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_vectors", MAKE_VECTORS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UNANSWERED = "No tool output found for tool call "


def _unanswered(message: str) -> str:
    return UNANSWERED if message.startswith(UNANSWERED) else message


@pytest.fixture(scope="session")
def reference_diff(make_vectors: Any) -> Any:
    """`diff(api, body_text)`: None when Recipe converts, renders and encodes the body exactly as the
    official reference does (conversion, prompt, special ranges, image sources, V4 token ids, or the
    error's status and message); otherwise a short description of the first difference.

    A reference rejection of `n` is skipped: Recipe accepts n in [1, 16] (documented divergence). For
    a Responses call without output the reference names one unanswered call at random (it walks a hash
    map), so that message is compared up to the call id.
    """
    import deepseek_recipe as dr

    from recipe.codec import convert, encode, render
    from recipe.errors import RequestError
    from recipe.tokenizer import load_deepseek_v4_tokenizer

    ref_tok = make_vectors._tokenizer()
    encodings = {"V4": dr.DeepseekV4Encoding().with_tokenizer(ref_tok), "V41": dr.DeepseekV41Encoding().with_tokenizer(ref_tok)}
    tokenizer = load_deepseek_v4_tokenizer()

    def diff(api: str, text: str) -> str | None:
        ref = make_vectors.run_reference(api, text, encodings)
        lenient = lenient_agrees(api, text)
        if lenient is not None:
            return lenient
        if "error" in ref:
            if ref["error"]["message"].startswith("Invalid n value"):
                return None
            try:
                convert(api, text, STRICT)
            except RequestError as exc:
                if (exc.status, _unanswered(exc.message)) == (ref["error"]["status"], _unanswered(ref["error"]["message"])):
                    return None
                return f"error {exc.status} {exc.message!r} != reference {ref['error']['status']} {ref['error']['message']!r}"
            return f"accepted; the reference rejects with {ref['error']['message']!r}"
        try:
            req = convert(api, text, STRICT)
        except RequestError as exc:
            return f"rejected with {exc.message!r}; the reference accepts"
        view = conversion_view(req)
        d = first_difference(view, {k: ref[k] for k in view})
        if d:
            return f"conversion {d}"
        rendered = render(req)
        if rendered.prompt != ref["prompt"]:
            return "prompt " + str(first_difference(rendered.prompt, ref["prompt"]))
        if [list(r) for r in rendered.special_ranges] != ref["special_ranges"]:
            ours = [rendered.prompt[a:b] + f"@{a}" for a, b in rendered.special_ranges]
            theirs = [ref["prompt"][a:b] + f"@{a}" for a, b in ref["special_ranges"]]
            return f"special ranges {first_difference(ours, theirs)}"
        if [_image(s) for s in rendered.image_sources] != ref["image_sources"]:
            return "image sources differ"
        if ref["token_ids"] is not None and encode(req, tokenizer) != ref["token_ids"]:
            return "token ids differ"
        return None

    return diff


def lenient_agrees(api: str, text: str) -> str | None:
    """None when the default (lenient) conversion of a body that meets no rule of
    `recipe.protocols.leniency` equals the strict one (same view and prompt, or the same error);
    otherwise the first difference. A body that meets a rule is checked by tests/codec/test_leniency.py."""
    from recipe.codec import convert, render
    from recipe.errors import RequestError

    if lenient_triggers(api, text):
        return None
    outcomes = []
    for options in (STRICT, None):
        try:
            req = convert(api, text, options)
            outcomes.append(("ok", conversion_view(req), render(req).prompt))
        except RequestError as exc:
            outcomes.append(("error", exc.status, exc.message))
    if outcomes[0] != outcomes[1]:
        return f"lenient differs from strict: {first_difference(list(outcomes[1]), list(outcomes[0]))}"
    return None
