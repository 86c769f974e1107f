"""The DeepSeek-R1 codec (`recipe.codecs.deepseek_r1`) against the R1-Distill-Qwen chat template itself, rendered by
`transformers`' `apply_chat_template` (the oracle): for random conversations the prompt text is the same, and so are
the token ids a tokenizer with the distills' added tokens gives it (transformers over the whole text, Recipe over
the rendered prompt's special ranges and plain text).

`data/deepseek_r1_distill_qwen.jinja` is the `chat_template` of DeepSeek-R1-Distill-Qwen's tokenizer_config.json
(the one with the `</think>` split of history and the `<｜Assistant｜><think>\\n` generation prompt).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from recipe.codecs import deepseek_r1 as r1

from recipe.conversation import Conversation, Message
from recipe.encoding import encode_rendered
from recipe.tokenizer import Tokenizer

TEMPLATE = (Path(__file__).parent / "data" / "deepseek_r1_distill_qwen.jinja").read_text(encoding="utf-8")
THINK = ("<think>", "</think>")  # added tokens of the distills' vocabularies, not flagged special
MARKUP = (*r1.SPECIAL_TOKENS, *THINK)


@cache
def tokenizers() -> tuple[Any, Tokenizer]:
    """A tiny byte-level BPE with the distills' added tokens: as transformers loads it, and as Recipe does."""
    from tokenizers import AddedToken, decoders, models, pre_tokenizers
    from tokenizers import Tokenizer as HFTokenizer
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = HFTokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in r1.SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s in THINK])
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=r1.BOS, eos_token=r1.EOS)
    hf.chat_template = TEMPLATE
    return hf, Tokenizer(tok.to_str())


def oracle(messages: list[Message]) -> str:
    hf, _ = tokenizers()
    dicts = [{"role": m.role, "content": m.content} for m in messages]
    cont = bool(messages[-1].prefix)
    out = hf.apply_chat_template(dicts, tokenize=False, add_generation_prompt=not cont, continue_final_message=cont)
    assert isinstance(out, str)
    return out


# Text with the characters the template and the markers are made of, newlines and non-ASCII.
ANY_TEXT = st.lists(st.sampled_from(list("ab <>/|｜▁thinkUserAssistant\n é中")) | st.sampled_from(MARKUP),
                    max_size=16).map("".join)
# Text without any markup spelling (so transformers' whole-text tokenization cannot find one inside it).
PLAIN = st.text(st.sampled_from(list("ab /|thinkUser\n\t é中🙂")), max_size=16)


def assistant_content(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """Answers, some with reasoning before one or more `</think>` (history keeps only the last part)."""
    return st.one_of(text, st.lists(text, min_size=2, max_size=3).map("</think>".join),
                     st.tuples(text, text).map(lambda p: f"<think>\n{p[0]}\n</think>\n\n{p[1]}"))


def conversations(text: st.SearchStrategy[str]) -> st.SearchStrategy[list[Message]]:
    message = st.one_of(
        st.builds(Message, st.just("system"), text),
        st.builds(Message, st.just("user"), text),
        st.builds(Message, st.just("assistant"), assistant_content(text)),
    )
    # a final assistant message continued (`prefix`): transformers cuts the prompt after its content, as stripped
    prefix = st.builds(Message, st.just("assistant"), text, prefix=st.just(True)).filter(
        lambda m: m.content and m.content == m.content.strip() and "</think>" not in m.content)
    return st.tuples(st.lists(message, min_size=1, max_size=6), st.none() | prefix).map(
        lambda p: p[0] + ([p[1]] if p[1] is not None else []))


@settings(max_examples=300, deadline=None)
@given(conversations(ANY_TEXT))
def test_the_prompt_is_the_templates(messages: list[Message]) -> None:
    assert r1.render(Conversation(messages=tuple(messages))).prompt == oracle(messages)


@settings(max_examples=200, deadline=None)
@given(conversations(PLAIN))
def test_the_prompt_ids_are_the_templates(messages: list[Message]) -> None:
    hf, tok = tokenizers()
    expected = hf(oracle(messages), add_special_tokens=False)["input_ids"]
    rendered = r1.render(Conversation(messages=tuple(messages)))
    assert encode_rendered(rendered, tok) == expected


def test_the_generation_prompt_opens_the_reasoning_with_the_think_token() -> None:
    hf, tok = tokenizers()
    ids = encode_rendered(r1.render(Conversation(messages=(Message("user", "hi"),))), tok)
    assert ids[-3:] == [tok.added_ids[r1.ASSISTANT], tok.added_ids["<think>"], hf.convert_tokens_to_ids("Ċ")]


def test_without_thinking_or_with_a_json_answer_the_reasoning_is_closed_empty() -> None:
    for conv in (Conversation(messages=(Message("user", "hi"),), thinking_mode=False),
                 Conversation(messages=(Message("user", "hi"),), response_format="json_object")):
        out = r1.render(conv)
        assert out.prompt.endswith(r1.ASSISTANT + r1.ANSWER_PROMPT) and r1.answers_directly(conv)
        assert [out.prompt[a:b] for a, b in out.special_ranges][-3:] == [r1.ASSISTANT, *THINK]
    # with thinking on and a text answer the prompt is the template's own
    assert not r1.answers_directly(Conversation(messages=(Message("user", "hi"),)))
