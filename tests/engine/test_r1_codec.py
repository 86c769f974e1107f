"""The DeepSeek-R1(-Distill) prompt format (`recipe.codecs.deepseek_r1`) and its tokens through a GGUF's own
tokenizer. Where a real R1-Distill GGUF is given (RECIPE_R1_GGUF=path), the codec is checked against that file's
own chat template rendered by jinja2 (the oracle); without one that test skips, saying so."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from recipe.codecs import deepseek_r1 as r1

from recipe.conversation import Conversation, Message

sys.path.insert(0, str(Path(__file__).parent / "models"))


def conv(*messages: Message, **kw: object) -> Conversation:
    return Conversation(messages=messages, **kw)  # type: ignore[arg-type]


CHAT = conv(Message("system", "Be brief."), Message("user", "2+2?"),
            Message("assistant", "<think>\nadd them\n</think>\n\n4"), Message("user", "and 3+3?"))


def test_turns_markers_and_generation_prompt() -> None:
    out = r1.render(CHAT)
    assert out.prompt == ("<｜begin▁of▁sentence｜>Be brief.<｜User｜>2+2?<｜Assistant｜>\n\n4<｜end▁of▁sentence｜>"
                          "<｜User｜>and 3+3?<｜Assistant｜><think>\n")
    specials = [out.prompt[a:b] for a, b in out.special_ranges]
    assert specials == [r1.BOS, r1.USER, r1.ASSISTANT, r1.EOS, r1.USER, r1.ASSISTANT, "<think>"]
    assert r1.STARTS_IN_THINKING and (r1.THINK_START, r1.THINK_END) == ("<think>", "</think>")


def test_a_prefix_assistant_message_is_continued() -> None:
    out = r1.render(conv(Message("user", "hi"), Message("assistant", "<think>\nhm", prefix=True)))
    assert out.prompt == "<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>\nhm"


def test_tools_are_refused_with_a_clear_error() -> None:
    from recipe.conversation import ToolDefinition

    with pytest.raises(ValueError, match="does not support tools"):
        r1.render(conv(Message("user", "x"), tools=(ToolDefinition(name="f"),)))
    with pytest.raises(ValueError, match="tool calls or tool results"):
        r1.render(conv(Message("user", "x"), Message("tool", "r", tool_call_id="1")))


def test_the_markers_are_single_special_tokens_of_the_gguf_tokenizer(tmp_path: Path) -> None:
    from qwen2_checkpoints import BOS, make_hf_qwen2, write_qwen2_gguf
    from recipe.engine.models.registry import load_model

    from recipe.tokenizer import Tokenizer

    _, info = load_model(write_qwen2_gguf(make_hf_qwen2(11, tied=True), tmp_path / "r1.gguf"))
    assert info.chat_format == "deepseek_r1"
    tok = Tokenizer(info.tokenizer_json)
    ids = tok.full.encode(r1.render(conv(Message("user", "hi"))).prompt, add_special_tokens=False).ids
    # <｜begin▁of▁sentence｜> <｜User｜> h i <｜Assistant｜> <think> \n (bytes are their own ids in this vocabulary)
    assert ids == [BOS, BOS + 2, ord("h"), ord("i"), BOS + 3, BOS + 4, ord("\n")]


@pytest.mark.skipif(not os.environ.get("RECIPE_R1_GGUF"), reason="no real R1-Distill GGUF given (RECIPE_R1_GGUF)")
def test_equals_the_files_own_chat_template() -> None:
    import jinja2
    from recipe.engine.models.gguf_file import read_gguf_file

    meta, _ = read_gguf_file(os.environ["RECIPE_R1_GGUF"])
    template = jinja2.Environment().from_string(meta["tokenizer.chat_template"])
    as_dicts = [{"role": m.role, "content": m.content} for m in CHAT.messages]
    expected = template.render(messages=as_dicts, add_generation_prompt=True, bos_token=r1.BOS)
    assert r1.render(CHAT).prompt == expected
