"""The whole engine on the real demo model: SmolLM2 answers "Paris", and a JSON-schema constraint from the
constraint layer yields output that `jsonschema` accepts."""

from __future__ import annotations

from collections.abc import Iterator

import jsonschema
import orjson
import pytest
from recipe.engine import LLM, SamplingParams

pytestmark = pytest.mark.slow  # loads the 135M model (about a minute on the shared box): run with -m slow

CHAT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def smol() -> Iterator[LLM]:
    llm = LLM("smollm2", num_threads=1, kv_cache_bytes=64 << 20)
    yield llm
    llm.shutdown()


def test_greedy_answer_names_paris(smol: LLM) -> None:
    out = smol.generate(CHAT.format(question="What is the capital of France?"),
                        SamplingParams(temperature=0.0, max_tokens=12))[0]
    assert "Paris" in (out.text or "")


def test_json_schema_constraint_yields_valid_json(smol: LLM, monkeypatch: pytest.MonkeyPatch) -> None:
    from recipe.constraints import batch, compile_constraint

    calls = []
    original = batch.fill_bitmasks

    def spy(matchers, out):  # type: ignore[no-untyped-def]
        calls.append(len(matchers))
        original(matchers, out)

    monkeypatch.setattr(batch, "fill_bitmasks", spy)

    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
              "additionalProperties": False}
    constraint = compile_constraint("json_schema", schema, smol.tokenizer,
                                    eos_token_ids=tuple(smol.model_info.eos_token_ids))
    prompt = CHAT.format(question="What is 2 + 2? Reply in JSON.")
    out = smol.generate(prompt, SamplingParams(temperature=0.0, max_tokens=24, constraint=constraint))[0]
    assert out.finish_reason == "stop"
    assert calls, "the engine fills constraint masks through the constraint layer's batched filler"
    jsonschema.validate(orjson.loads(out.text or ""), schema)
