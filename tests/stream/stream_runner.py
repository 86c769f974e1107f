"""Runs StreamProcessor over given cases in a fresh process with the compiled or the pure-Python stream
modules, and prints what a client would see: every SSE frame, the complete response, the error.

`python tests/stream/stream_runner.py compiled|pure < cases.json > results.json`, where cases.json is a
list of `{"case": <stream_differential case>, "updates": [...]}`. It exits with status 3 when the
modules it was asked for are not the ones that loaded (so a comparison can never be pure against pure).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

_CALL_ID = re.compile(r"call_(\d\d)_[A-Za-z0-9_-]{20,40}")
_TIMES = re.compile(r'"(created|created_at|completed_at)": ?\d+')


def _frame(raw: bytes) -> str:
    text = raw.decode("utf-8")
    return _TIMES.sub(r'"\1":0', _CALL_ID.sub(lambda m: f"call_{m.group(1)}_X", text))


def run_case(case: dict[str, Any], upds: list[dict[str, Any]], tokenizer: Any) -> dict[str, Any]:
    from stream_differential import to_update  # this script's folder is on sys.path

    from recipe.codec import ConversionOptions, convert
    from recipe.conversation import ModelVersion
    from recipe.errors import RequestError
    from recipe.stream import StreamInputError, StreamProcessor, responses_echo

    api = case["api"]
    try:
        request = convert(api, case["body"], ConversionOptions(strict_reference=True))
    except RequestError as exc:
        return {"request_error": str(exc)}
    fmt = "deepseek_v41" if request.model_version is ModelVersion.V41 else "deepseek_v4"
    echo = responses_echo(case["body"]) if api == "responses" else None
    proc = StreamProcessor(api, request, response_id="resp-1", model=case["body"]["model"], tokenizer=tokenizer,
                           output_format=fmt, created=1700000000, echo=echo)
    frames: list[str] = []
    error = None
    try:
        for u in upds:
            frames += [_frame(e.sse()) for e in proc.feed(to_update(u))]
            if proc.finished:
                break
        frames += [_frame(e.sse()) for e in proc.finish()]
    except StreamInputError as exc:
        error = str(exc)
        frames += [_frame(e.sse()) for e in proc.error_events(error)]
    logged = [_frame(e.sse()) for e in proc.events]
    return {"frames": frames, "logged": logged, "error": error,
            "response": _frame(json.dumps(proc.response(), ensure_ascii=False, sort_keys=True).encode())}


def main() -> int:
    from recipe import compiled_stream

    want = sys.argv[1]
    compiled_stream.use_compiled(want == "compiled")
    import recipe.stream.processor  # noqa: F401  (loads the stream modules now, to check which)
    from recipe.tokenizer import load_deepseek_v4_tokenizer

    tokenizer = load_deepseek_v4_tokenizer()
    if compiled_stream.active() != (want == "compiled"):
        print(f"asked for the {want} stream modules, loaded the other ones", file=sys.stderr)
        return 3
    cases = json.load(sys.stdin)
    json.dump([run_case(c["case"], c["updates"], tokenizer) for c in cases], sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
