"""A DeepSeek-R1-Distill checkpoint served: a tiny qwen2 GGUF carrying R1-Distill-Qwen's own chat template is read by
the engine's loader, which names its prompt format `deepseek_r1`; the server then renders the R1 prompt and splits
the model's `<think>` reasoning into Chat `reasoning_content`, Messages `thinking` blocks and Responses `reasoning`
items, streamed and not, checked with the official `openai` and `anthropic` SDKs.

The model's output is scripted (reasoning, the `</think>` token, the answer, end of sequence) by a backend that
serves the loaded checkpoint's tokenizer and card; one test runs the real engine on the same file.
"""

from __future__ import annotations

import asyncio
import inspect
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anthropic
import openai
import pytest
from recipe.codecs import deepseek_r1 as r1
from recipe.server.backend import EchoBackend, GenerationDelta, GenerationParams, ModelCard

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine" / "models"))

MODEL = "tiny-r1-distill"
KEY = "sk-r1-test"
TEMPLATE = (Path(__file__).resolve().parents[1] / "codecs" / "data" / "deepseek_r1_distill_qwen.jinja").read_text(
    encoding="utf-8")
REASONING = "Two and two.\nThat makes 4 (not </think> spelled out)."
ANSWER = "The answer is 4."
JSON_ANSWER = '{"answer": 4}'
USER: Any = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def r1_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from qwen2_checkpoints import make_hf_qwen2, write_qwen2_gguf

    return write_qwen2_gguf(make_hf_qwen2(5, tied=True, hidden=64, inter=128), tmp_path_factory.mktemp("r1") / "r1.gguf",
                            chat_template=TEMPLATE)


@dataclass
class ScriptedR1(EchoBackend):
    """Answers every request as an R1 model would: `chunk` ids per delta of REASONING, the `</think>` token and
    "\\n\\n" + ANSWER; JSON_ANSWER alone when the prompt closed the reasoning block. Records the prompts."""

    prompts: list[list[int]] = field(default_factory=list)

    def script(self, prompt_ids: Sequence[int]) -> list[int]:
        tok = self.model.tokenizer
        answer_prompt = [tok.added_ids["</think>"], *tok.encode_plain("\n\n")]
        if list(prompt_ids[-len(answer_prompt):]) == answer_prompt:
            return [*tok.encode_plain(JSON_ANSWER), *self.model.eos_token_ids]
        return [*tok.encode_plain(REASONING), tok.added_ids["</think>"], *tok.encode_plain("\n\n" + ANSWER),
                *self.model.eos_token_ids]

    async def generate(self, request_id: str, prompt_ids: Sequence[int],
                       params: GenerationParams) -> AsyncIterator[GenerationDelta]:
        self.prompts.append(list(prompt_ids))
        ids = self.script(prompt_ids)
        for start in range(0, len(ids), self.chunk):
            part = tuple(ids[start:start + self.chunk])
            last = start + self.chunk >= len(ids)
            yield GenerationDelta(0, part, len(prompt_ids), finished=last, finish_reason="stop" if last else None)
            await asyncio.sleep(0)


@pytest.fixture(scope="module")
def card(r1_gguf: Path) -> ModelCard:
    from recipe.engine.models.registry import load_model
    from recipe.server.engine_backend import model_card

    _, info = load_model(r1_gguf)
    return model_card(SimpleNamespace(model_info=info, max_model_len=1024), MODEL)


@pytest.fixture(scope="module")
def backend(card: ModelCard) -> ScriptedR1:
    return ScriptedR1(model=card, chunk=3)


@pytest.fixture(scope="module")
def srv(backend: ScriptedR1, serve):
    from recipe.server.app import create_app
    from recipe.server.config import ServerConfig

    with serve(create_app(ServerConfig(api_keys=(KEY,), responses_db=":memory:"), backend)) as s:
        yield s


@pytest.fixture(scope="module")
def oa(srv) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.base + "/v1", api_key=KEY, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def an(srv) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.base, api_key=KEY, max_retries=0, timeout=60)


def r1_prompt_ids(card: ModelCard, messages: list[dict[str, str]]) -> list[int]:
    from recipe.conversation import Conversation, Message
    from recipe.encoding import encode_rendered

    conv = Conversation(messages=tuple(Message(m["role"], m["content"]) for m in messages))  # type: ignore[arg-type]
    return list(encode_rendered(r1.render(conv), card.tokenizer))


def test_the_loader_names_the_r1_format_from_the_files_template(card: ModelCard) -> None:
    assert card.chat_format == "deepseek_r1" and card.architecture == "qwen2"


def test_chat_reasoning_content_streamed_and_not(oa: openai.OpenAI, backend: ScriptedR1, card: ModelCard) -> None:
    msgs: Any = [{"role": "system", "content": "Be brief."}, *USER]
    r = oa.chat.completions.create(model=MODEL, messages=msgs)
    assert backend.prompts[-1] == r1_prompt_ids(card, msgs)  # the R1 template's prompt, `<think>\n` opened
    msg = r.choices[0].message
    assert (msg.model_extra or {}).get("reasoning_content") == REASONING and msg.content == ANSWER
    assert r.choices[0].finish_reason == "stop"
    reasoning, content = [], []
    for chunk in oa.chat.completions.create(model=MODEL, messages=msgs, stream=True):
        for c in chunk.choices:
            reasoning.append((c.delta.model_extra or {}).get("reasoning_content") or "")
            content.append(c.delta.content or "")
    assert ("".join(reasoning), "".join(content)) == (REASONING, ANSWER)


def test_messages_thinking_blocks_streamed_and_not(an: anthropic.Anthropic) -> None:
    m = an.messages.create(model=MODEL, max_tokens=256, messages=USER)
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[0].thinking == REASONING and m.content[1].text == ANSWER  # type: ignore[union-attr]
    thinking, text = [], []
    with an.messages.stream(model=MODEL, max_tokens=256, messages=USER) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                if event.delta.type == "thinking_delta":
                    thinking.append(event.delta.thinking)
                elif event.delta.type == "text_delta":
                    text.append(event.delta.text)
        final = stream.get_final_message()
    assert ("".join(thinking), "".join(text)) == (REASONING, ANSWER)
    assert [b.model_dump(exclude={"signature"}) for b in final.content] == \
        [b.model_dump(exclude={"signature"}) for b in m.content]


def test_responses_reasoning_items_streamed_and_not(oa: openai.OpenAI) -> None:
    def split(output: list[Any]) -> tuple[str, str]:
        reasoning = "".join(p.text for i in output if i.type == "reasoning" for p in (i.content or []))
        answer = "".join(p.text for i in output if i.type == "message" for p in i.content)
        return reasoning, answer

    r = oa.responses.create(model=MODEL, input="What is 2+2?")
    assert [i.type for i in r.output] == ["reasoning", "message"]
    assert split(r.output) == (REASONING, ANSWER) and r.output_text == ANSWER
    deltas: dict[str, list[str]] = {"response.reasoning_text.delta": [], "response.output_text.delta": []}
    completed = None
    for event in oa.responses.create(model=MODEL, input="What is 2+2?", stream=True):
        if event.type in deltas:
            deltas[event.type].append(event.delta)  # type: ignore[union-attr, arg-type]
        elif event.type == "response.completed":
            completed = event.response
    streamed = ("".join(deltas["response.reasoning_text.delta"]), "".join(deltas["response.output_text.delta"]))
    assert completed is not None and streamed == split(completed.output) == (REASONING, ANSWER)


def test_tools_are_refused_in_each_protocols_error_shape(oa: openai.OpenAI, an: anthropic.Anthropic) -> None:
    tool: Any = {"type": "function", "function": {"name": "add", "parameters": {"type": "object", "properties": {}}}}
    with pytest.raises(openai.BadRequestError) as chat_err:
        oa.chat.completions.create(model=MODEL, messages=USER, tools=[tool])
    err = chat_err.value.body
    assert isinstance(err, dict) and "does not support tools" in err["message"] and err["param"] == "tools"
    with pytest.raises(openai.BadRequestError) as resp_err:
        oa.responses.create(model=MODEL, input="x", tools=[{"type": "function", "name": "add", "parameters": {"type": "object"}}])  # type: ignore[list-item]
    assert "does not support tools" in str(resp_err.value)
    with pytest.raises(anthropic.BadRequestError) as msg_err:
        an.messages.create(model=MODEL, max_tokens=64, messages=USER,
                           tools=[{"name": "add", "input_schema": {"type": "object"}}])
    body = msg_err.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "does not support tools" in body["error"]["message"]
    # tool_choice "none": the tools are not offered, and the request is answered
    r = oa.chat.completions.create(model=MODEL, messages=USER, tools=[tool], tool_choice="none")
    assert r.choices[0].message.content == ANSWER


def test_json_answers_and_thinking_off_skip_the_reasoning(oa: openai.OpenAI, backend: ScriptedR1) -> None:
    answer_prompt = backend.model.tokenizer.encode_plain("\n\n")
    as_json: Any = [{"role": "user", "content": "What is 2+2? Answer in JSON."}]
    r = oa.chat.completions.create(model=MODEL, messages=as_json, response_format={"type": "json_object"})
    assert backend.prompts[-1][-len(answer_prompt):] == answer_prompt
    msg = r.choices[0].message
    assert msg.content == JSON_ANSWER and not (msg.model_extra or {}).get("reasoning_content")
    off = oa.chat.completions.create(model=MODEL, messages=USER, extra_body={"thinking": {"type": "disabled"}})
    assert off.choices[0].message.content == JSON_ANSWER  # the scripted model answers a closed reasoning block so


def test_the_engine_serves_the_gguf_with_the_r1_prompt(r1_gguf: Path, serve, card: ModelCard) -> None:
    """The real engine on the file: the R1 prompt goes in, and a seeded output (random weights, so reasoning
    that may never close) streams as the same reasoning/content split as the complete response."""
    from recipe.engine import AsyncLLM
    from recipe.server.app import create_app
    from recipe.server.config import ServerConfig
    from recipe.server.engine_backend import EngineBackend

    engine = AsyncLLM(str(r1_gguf), max_num_seqs=2, num_threads=1)
    try:
        backend = EngineBackend(engine, name=MODEL)
        assert backend.model.chat_format == "deepseek_r1"
        with serve(create_app(ServerConfig(api_keys=(), responses_db=":memory:"), backend)) as s:
            client = openai.OpenAI(base_url=s.base + "/v1", api_key="none", max_retries=0, timeout=120)
            r = client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, seed=1)
            reasoning, content = [], []
            for chunk in client.chat.completions.create(model=MODEL, messages=USER, max_tokens=6, seed=1,
                                                        stream=True):
                for c in chunk.choices:
                    reasoning.append((c.delta.model_extra or {}).get("reasoning_content") or "")
                    content.append(c.delta.content or "")
    finally:
        done = engine.shutdown()
        if inspect.iscoroutine(done):
            asyncio.run(done)
    assert r.usage is not None and r.usage.prompt_tokens == len(r1_prompt_ids(card, USER))
    msg = r.choices[0].message
    assert ((msg.model_extra or {}).get("reasoning_content") or "", msg.content or "") == \
        ("".join(reasoning), "".join(content))
    assert "".join(reasoning)  # the output starts inside the reasoning the prompt opened


def test_the_chat_format_flag_overrides_the_checkpoints(backend: ScriptedR1) -> None:
    import argparse

    from recipe.server.cli_serve import add_parser, build_backend, with_chat_format

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["serve", "--backend", "echo", "--chat-format", "deepseek_r1"])
    echo = with_chat_format(build_backend(args), args.chat_format)
    assert echo.model.chat_format == "deepseek_r1"  # the echo model's own is deepseek_v4
    unset = parser.parse_args(["serve", "--backend", "echo"])
    assert with_chat_format(build_backend(unset), unset.chat_format).model.chat_format == "deepseek_v4"
    assert with_chat_format(backend, None).model.chat_format == "deepseek_r1"
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--chat-format", "llama3"])
