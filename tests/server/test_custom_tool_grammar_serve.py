"""A Responses custom tool with Codex's apply_patch grammar, through the server: the request's tool-call
constraint holds the call's input to the grammar, and the call comes back as a `custom_tool_call`.

The backend plays a script (the model's output) token by token through the constraint the server compiled,
as a sampler would: a token the mask refuses ends the output there (finish "length"), so what reaches the
client is what the mask allowed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, GenerationDelta, GenerationParams, echo_model_card
from recipe.server.config import ServerConfig

from recipe.constraints import bitmask

lark = pytest.importorskip("lark", reason="the lark package (dev extra) parses the inputs as Codex's grammar")

MODEL = "DeepSeek-V4-Pro"
GRAMMAR = (Path(__file__).resolve().parents[1] / "constraints" / "data" / "codex_apply_patch.lark").read_text()
PATCH = "*** Begin Patch\n*** Update File: hello.py\n@@ def main():\n-    print('hi')\n+    print(\"hello\")\n*** End Patch\n"
BROKEN = "*** Begin Patch\n*** Update File: hello.py\n~    print('hi')\n*** End Patch\n"


def script(patch: str) -> str:
    """A forced call's output after the prompt opened the DSML block."""
    return ('<｜DSML｜invoke name="apply_patch">\n<｜DSML｜parameter name="input" string="true">'
            f"{patch}</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>")


class MaskedScript(EchoBackend):
    """Emits `self.output`'s tokens while the request's constraint allows them."""

    def __init__(self) -> None:
        super().__init__(model=echo_model_card(MODEL))
        self.output = ""
        self.refused_at: int | None = None  # the character offset of the first refused token
        self.constrained = False

    async def generate(self, request_id: str, prompt_ids: Sequence[int],
                       params: GenerationParams) -> AsyncIterator[GenerationDelta]:
        tok = self.model.tokenizer
        ids = tok.full.encode(self.output, add_special_tokens=False).ids
        self.refused_at = None
        self.constrained = params.constraint is not None
        matcher = params.constraint.matcher() if params.constraint is not None else None
        mask = params.constraint.allocate_bitmask() if params.constraint is not None else None
        for n, tid in enumerate(ids):
            if matcher is not None and mask is not None:
                matcher.fill_bitmask(mask)
                if not bitmask.is_allowed(mask, tid) or not matcher.accept(tid):
                    self.refused_at = len(tok.decode(ids[:n], skip_special_tokens=False))
                    yield GenerationDelta(index=0, token_ids=(), prompt_tokens=len(prompt_ids), finished=True,
                                          finish_reason="length", queue_time_s=0.0)
                    return
            last = n == len(ids) - 1
            yield GenerationDelta(index=0, token_ids=(tid,), prompt_tokens=len(prompt_ids), finished=last,
                                  finish_reason="stop" if last else None, queue_time_s=0.0)


def served(**config: Any) -> tuple[TestClient, MaskedScript]:
    backend = MaskedScript()
    return TestClient(create_app(ServerConfig(**config), backend)), backend


def body(stream: bool = False, definition: str = GRAMMAR) -> dict[str, Any]:
    return {"model": MODEL, "input": "Say hello instead of hi in hello.py", "stream": stream,
            "tool_choice": {"type": "custom", "name": "apply_patch"},
            "tools": [{"type": "custom", "name": "apply_patch", "description": "Edit files.",
                       "format": {"type": "grammar", "syntax": "lark", "definition": definition}},
                      {"type": "function", "name": "shell", "parameters": {"type": "object", "properties": {}}}]}


def parses(text: str) -> bool:
    try:
        lark.Lark(GRAMMAR.replace("/(.*)/", "/(.+)/?")).parse(text)  # dynamic Earley: no zero-width regex
    except lark.exceptions.LarkError:
        return False
    return True


def test_a_forced_custom_tool_comes_back_as_a_custom_tool_call_that_parses() -> None:
    c, backend = served()
    backend.output = script(PATCH)
    r = c.post("/v1/responses", json=body())
    assert r.status_code == 200, r.text
    assert backend.constrained and backend.refused_at is None
    (item,) = r.json()["output"]
    assert item["type"] == "custom_tool_call" and item["name"] == "apply_patch"
    assert item["input"] == PATCH and parses(item["input"])


def test_the_stream_carries_the_same_custom_tool_call() -> None:
    c, backend = served()
    backend.output = script(PATCH)
    with c.stream("POST", "/v1/responses", json=body(stream=True)) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    events = [json.loads(line[6:]) for line in lines if line != "data: [DONE]"]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta")
    (done,) = [e for e in events if e["type"] == "response.output_item.done"]
    completed = events[-1]
    assert completed["type"] == "response.completed"
    assert deltas == PATCH and done["item"]["input"] == PATCH
    assert completed["response"]["output"] == [done["item"]]


def test_the_mask_refuses_a_patch_the_grammar_does_not_allow() -> None:
    c, backend = served()
    backend.output = script(BROKEN)
    assert not parses(BROKEN)
    r = c.post("/v1/responses", json=body())
    assert r.status_code == 200, r.text
    refused = backend.refused_at
    assert refused is not None
    assert script(BROKEN)[:refused].endswith("hello.py\n")  # the line starting with "~"
    assert r.json()["status"] == "incomplete"


def test_a_forced_custom_tool_is_called_once() -> None:
    c, backend = served()
    one = script(PATCH)
    backend.output = one.replace("</｜DSML｜tool_calls>", one.split("\n", 1)[0] + "\n", 1)
    r = c.post("/v1/responses", json=body())
    assert r.status_code == 200, r.text
    assert backend.refused_at == one.index("</｜DSML｜tool_calls>")  # a second invoke is refused


def test_strict_reference_leaves_the_input_free_as_the_reference_does() -> None:
    c, backend = served(strict_reference=True)
    backend.output = script(BROKEN)
    r = c.post("/v1/responses", json={**body(), "reasoning": {"effort": "none"}})  # the reference's condition
    assert r.status_code == 200, r.text
    assert backend.constrained and backend.refused_at is None  # a tool-call constraint, the input unconstrained
    (item,) = r.json()["output"]
    assert item["type"] == "custom_tool_call" and item["input"] == BROKEN


@pytest.mark.parametrize(("definition", "named"), [('start: "a"\n%ignore " "\n', "%ignore"),
                                                   ("start: /a(?=b)/\n", "refused by llguidance")])
def test_a_grammar_that_cannot_be_enforced_is_a_400_in_the_responses_shape(definition: str, named: str) -> None:
    c, backend = served()
    backend.output = script(PATCH)
    r = c.post("/v1/responses", json=body(definition=definition))
    assert r.status_code == 400
    error = r.json()["error"]
    assert named in error["message"] and error["type"] == "invalid_request_error"
