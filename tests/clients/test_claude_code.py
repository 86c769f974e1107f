"""Claude Code (`claude -p ... --output-format stream-json`) against `recipe serve` through ANTHROPIC_BASE_URL.

On the echo backend Claude Code sends its whole agent prompt (system prompt, ~20 tools, system reminders)
and the echo answers the last user turn as model output, so a prompt written as a DSML tool call is a
tool call: Claude Code runs its Read tool, sends the tool_result on the next turn, and the echo's answer
to that turn carries the file's text. On the demo model, a short exchange with its own system prompt and
no tools (SmolLM2's context is 8,192 tokens; Claude Code's full prompt is ~12,000).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from client_servers import DEMO_MODEL, ECHO_MODEL, RecipeServer, npm_client

READ_CALL = ('<｜DSML｜tool_calls>\n<｜DSML｜invoke name="Read">\n'
             '<｜DSML｜parameter name="file_path" string="true">{path}</｜DSML｜parameter>\n'
             '</｜DSML｜invoke>\n</｜DSML｜tool_calls>')


def claude(server: RecipeServer, model: str, prompt: str, home: Path, *extra: str, ok: bool = True,
           max_output_tokens: int = 32000) -> list[dict[str, Any]]:
    env = {**os.environ, "ANTHROPIC_BASE_URL": server.base, "ANTHROPIC_API_KEY": "sk-clients", "HOME": str(home),
           "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(max_output_tokens),
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
           "ANTHROPIC_DEFAULT_HAIKU_MODEL": model, "ANTHROPIC_DEFAULT_SONNET_MODEL": model,
           "ANTHROPIC_DEFAULT_OPUS_MODEL": model}
    done = subprocess.run([str(npm_client("claude")), "-p", prompt, "--model", model, "--output-format", "stream-json",
                           "--verbose", *extra], capture_output=True, text=True, timeout=300, env=env, cwd=home)
    assert done.returncode == 0 or not ok, done.stdout[-3000:] + done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def blocks(events: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [b for e in events if e.get("type") == role for b in e["message"]["content"]]


def result(events: list[dict[str, Any]]) -> dict[str, Any]:
    found = [e for e in events if e.get("type") == "result"]
    assert len(found) == 1, events
    return found[0]


def test_claude_code_answers_through_the_echo(echo_server: RecipeServer, tmp_path: Path) -> None:
    events = claude(echo_server, ECHO_MODEL, "Say hello, Recipe.", tmp_path)
    assert events[0]["type"] == "system" and events[0]["model"] == ECHO_MODEL
    done = result(events)
    assert done["subtype"] == "success" and not done["is_error"], done
    assert "Say hello, Recipe." in done["result"]


def test_claude_code_tool_loop(echo_server: RecipeServer, tmp_path: Path) -> None:
    note = tmp_path / "note.txt"
    note.write_text("recipe tool loop 4242\n")
    events = claude(echo_server, ECHO_MODEL, READ_CALL.format(path=note), tmp_path)
    uses = [b for b in blocks(events, "assistant") if b["type"] == "tool_use"]
    assert [(u["name"], u["input"]) for u in uses] == [("Read", {"file_path": str(note)})]
    results = [b for b in blocks(events, "user") if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [uses[0]["id"]]
    assert "recipe tool loop 4242" in str(results[0]["content"])
    done = result(events)
    assert done["subtype"] == "success" and "recipe tool loop 4242" in done["result"], done


def test_claude_code_short_exchange_on_the_demo_model(demo_server: RecipeServer, tmp_path: Path) -> None:
    """Claude Code samples at temperature 1 and puts its environment notes in a system message after the
    user's; SmolLM2-135M then often writes on to any limit. So the exchange is held to what the server owes:
    streamed text from the demo model on every turn, and either a natural end or Claude Code's own report
    of a reply past its CLAUDE_CODE_MAX_OUTPUT_TOKENS (it asks to continue, then stops), never another error."""
    events = claude(demo_server, DEMO_MODEL, "What is the capital of France? One word.", tmp_path,
                    "--system-prompt", "You are a helpful assistant.", "--tools", "", ok=False, max_output_tokens=48)
    done = result(events)
    texts = [b["text"] for b in blocks(events, "assistant") if b["type"] == "text"]
    model_texts = [t for t in texts if not t.startswith("API Error")]
    assert model_texts and all(t.strip() for t in model_texts), events
    assert done["subtype"] == "success", done
    assert not done["is_error"] or done.get("api_error") == "max_output_tokens", done
    assert done["usage"]["output_tokens"] > 0
