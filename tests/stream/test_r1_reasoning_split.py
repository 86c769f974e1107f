"""DeepSeek-R1 output (`output_format="deepseek_r1"`): the stream parser splits reasoning from the answer at the
`</think>` token, the same way for every chunking of the model's tokens.

For random reasoning and answer texts cut into random token chunks: the deltas a client concatenates (Chat
`reasoning_content` / `content`, Messages `thinking_delta` / `text_delta`, Responses `reasoning_text.delta` /
`output_text.delta`) equal the complete response of the same tokens fed at once, and both equal the split the
parser's rules give (reasoning without its leading and trailing newlines, answer without its leading ones).
A `</think>` spelled with plain tokens is text, as for DeepSeek V4: only the token ends the reasoning.
"""

from __future__ import annotations

from functools import cache
from itertools import pairwise
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.codecs import deepseek_r1 as r1

from recipe.codec import ConversionOptions, convert
from recipe.conversation import ModelVersion
from recipe.stream import StreamProcessor
from recipe.stream.processor import StreamProcessor as ProcessorClass
from recipe.stream.text_parser import OutputTextParser
from recipe.stream.updates import Finish, Ready, TokenUpdate
from recipe.tokenizer import Tokenizer

MODEL = "r1-distill"
Api = Literal["chat", "messages", "responses"]
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": MODEL, "messages": [{"role": "user", "content": "2+2?"}], "stream": True},
    "messages": {"model": MODEL, "max_tokens": 64, "messages": [{"role": "user", "content": "2+2?"}], "stream": True},
    "responses": {"model": MODEL, "input": "2+2?", "stream": True},
}


@cache
def tokenizer() -> Tokenizer:
    """Byte-level BPE over the 256 bytes with the R1 markers and `<think>`/`</think>` as added tokens (as a
    DeepSeek-R1-Distill GGUF's or tokenizer.json's vocabulary holds them)."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = HFTokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in r1.SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in ("<think>", "</think>")])
    return Tokenizer(tok.to_str())


def request(api: str) -> Any:
    options = ConversionOptions(model_versions_by_name={MODEL: ModelVersion.V41})
    return convert(api, BODIES[api], options)


def run(api: Api, chunks: list[list[int]]) -> tuple[list[Any], dict[str, Any]]:
    proc = StreamProcessor(api, request(api), response_id="r1", model=MODEL, tokenizer=tokenizer(),
                           output_format="deepseek_r1", created=0)
    events = proc.feed(Ready(3, 0, "fp"))
    for chunk in chunks:
        events += proc.feed(TokenUpdate(chunk))
    events += proc.feed(Finish("stop"))
    return events, proc.response()


def streamed(api: str, events: list[Any]) -> tuple[str, str]:
    """(reasoning, answer) as a client concatenates a stream's deltas."""
    reasoning, answer = [], []
    for e in events:
        if e.done:
            continue
        d = e.data
        if api == "chat":
            for c in d.get("choices", ()):
                reasoning.append(c["delta"].get("reasoning_content") or "")
                answer.append(c["delta"].get("content") or "")
        elif api == "messages" and e.name == "content_block_delta":
            reasoning.append(d["delta"].get("thinking", ""))
            answer.append(d["delta"].get("text", ""))
        elif e.name == "response.reasoning_text.delta":
            reasoning.append(d["delta"])
        elif e.name == "response.output_text.delta":
            answer.append(d["delta"])
    return "".join(reasoning), "".join(answer)


def complete(api: str, body: dict[str, Any]) -> tuple[str, str]:
    """(reasoning, answer) of a complete response."""
    if api == "chat":
        msg = body["choices"][0]["message"]
        return msg.get("reasoning_content") or "", msg.get("content") or ""
    if api == "messages":
        blocks = body["content"]
        return ("".join(b["thinking"] for b in blocks if b["type"] == "thinking"),
                "".join(b["text"] for b in blocks if b["type"] == "text"))
    items = body["output"]
    return ("".join(p["text"] for i in items if i["type"] == "reasoning" for p in i["content"]),
            "".join(p["text"] for i in items if i["type"] == "message" for p in i["content"]))


TEXT = st.lists(st.sampled_from(["a", "b", " ", "\n", "<", "/", "think", ">", "</think>", "é", "中", "🙂", "\t"]),
                max_size=20).map("".join)


def chunked(ids: list[int], cuts: list[int]) -> list[list[int]]:
    points = sorted({c % (len(ids) + 1) for c in cuts} | {0, len(ids)})
    return [ids[a:b] for a, b in pairwise(points) if b > a]


@settings(max_examples=150, deadline=None)
@given(api=st.sampled_from(["chat", "messages", "responses"]), reasoning=TEXT, answer=TEXT,
       closed=st.booleans(), cuts=st.lists(st.integers(0, 200), max_size=12), fast=st.booleans())
def test_streamed_reasoning_and_answer_equal_the_complete_response(
    api: Api, reasoning: str, answer: str, closed: bool, cuts: list[int], fast: bool
) -> None:
    tok = tokenizer()
    ids = tok.encode_plain(reasoning)
    if closed:
        ids += [tok.added_ids["</think>"], *tok.encode_plain(answer)]
    saved = (ProcessorClass.fast_paths, OutputTextParser.fast_path)
    ProcessorClass.fast_paths = OutputTextParser.fast_path = fast
    try:
        events, _ = run(api, chunked(ids, cuts))
        _, whole = run(api, [ids] if ids else [])
    finally:
        ProcessorClass.fast_paths, OutputTextParser.fast_path = saved
    expected = (reasoning.strip("\n"), answer.lstrip("\n") if closed else "")
    if not closed:
        expected = (reasoning.lstrip("\n"), "")  # no `</think>`: trailing newlines are released at the end
    assert streamed(api, events) == complete(api, whole) == expected


def test_a_think_end_in_the_answer_is_removed_and_special_tokens_stay_opaque() -> None:
    tok = tokenizer()
    end = tok.added_ids["</think>"]
    ids = [*tok.encode_plain("hm"), end, *tok.encode_plain("4"), end, *tok.encode_plain("!")]
    apis: tuple[Api, ...] = ("chat", "messages", "responses")
    for api in apis:
        events, body = run(api, [[i] for i in ids])
        assert streamed(api, events) == complete(api, body) == ("hm", "4!")
