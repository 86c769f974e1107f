from recipe.tokenizer import MissingSpecialTokenError, load_deepseek_v4_tokenizer


def test_plain_encoding_ignores_special_spellings() -> None:
    tok = load_deepseek_v4_tokenizer()
    assert tok.vocab_size == 129280
    text = "<｜User｜>x<think></think><｜end▁of▁sentence｜>｜DSML｜<｜ref｜>"
    plain = tok.encode_plain(text)
    assert not set(plain) & tok.special_ids
    assert tok.full.encode(text, add_special_tokens=False).ids == [128803, 90, 128821, 128822, 1, 128825, 129278]


def test_missing_special_token_names_it() -> None:
    tok = load_deepseek_v4_tokenizer()
    try:
        tok.special_id("<｜System｜>")
    except MissingSpecialTokenError as exc:
        assert '"<｜System｜>" is not in the added vocabulary' in str(exc)
    else:
        raise AssertionError("V4 tokenizer has no <｜System｜>")
