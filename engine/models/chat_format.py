"""Which codec renders a checkpoint's prompts, read off the chat template it ships (`ModelInfo.chat_format`)."""

from __future__ import annotations

import json
from pathlib import Path

# DeepSeek-R1 and its distills (Qwen2 and Llama) mark turns with these full-width-bar tokens.
R1_MARKERS = ("<｜Assistant｜>", "<｜User｜>")


def chat_format_of(chat_template: str | None) -> str:
    """"deepseek_r1" for a DeepSeek-R1(-Distill) template, else "chatml" (SmolLM2's and Qwen2's own)."""
    if chat_template and all(m in chat_template for m in R1_MARKERS):
        return "deepseek_r1"
    return "chatml"


def folder_chat_template(folder: str | Path) -> str | None:
    """The `chat_template` of a checkpoint folder's tokenizer_config.json (or chat_template.jinja), if any."""
    root = Path(folder)
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    cfg = root / "tokenizer_config.json"
    if not cfg.is_file():
        return None
    try:
        value = json.loads(cfg.read_text(encoding="utf-8")).get("chat_template")
    except (json.JSONDecodeError, AttributeError):
        return None
    return value if isinstance(value, str) else None
