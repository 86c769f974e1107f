"""The playground in a real browser (Debian's chromium driven by Playwright): encode, decode, schemas.

Fails on any console error. The screenshot lands in artifacts/playground-*.png.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "conformance"))
from fake_server import ServerThread
from recipe.server.playground import standalone_app

from recipe.codec import convert, encode, render
from recipe.tokenizer import load_deepseek_v4_tokenizer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).parents[2] / "artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    with ServerThread(standalone_app()) as url:
        yield f"{url}/playground"


@pytest.fixture()
def page(page_url: str, tmp_path: Path) -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Debian's chromium is required (scripts/setup.sh installs it)"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        external: list[str] = []
        page.on("request", lambda r: external.append(r.url) if not r.url.startswith(page_url.rsplit("/", 1)[0]) and not r.url.startswith("data:") else None)
        page.goto(page_url)
        page.wait_for_selector("body[data-ready='1']")
        yield page
        assert errors == [], f"console errors: {errors}"
        assert external == [], f"the page reached outside the app: {external}"
        browser.close()


def test_encode_highlights_the_codecs_special_tokens_and_ids(page) -> None:  # type: ignore[no-untyped-def]
    page.select_option("#api", "chat")
    page.select_option("#example", "Tools, thinking on")
    page.click("#encode-btn")
    page.wait_for_selector("#ids span")
    body = json.loads(page.input_value("#request"))
    req = convert("chat", body)
    rendered = render(req)
    expected_specials = [rendered.prompt[s:e] for s, e in rendered.special_ranges]
    shown_specials = page.eval_on_selector_all("#prompt .special", "els => els.map(e => e.textContent)")
    assert shown_specials == expected_specials and len(expected_specials) > 5
    assert page.text_content("#prompt") == rendered.prompt
    shown_ids = [int(x) for x in page.eval_on_selector_all("#ids span", "els => els.map(e => e.dataset.id)")]
    assert shown_ids == encode(req, load_deepseek_v4_tokenizer())
    titles = page.eval_on_selector_all("#ids span", "els => els.map(e => e.title)")
    assert titles[0] == "<｜begin▁of▁sentence｜>"
    assert f"{len(shown_ids)} tokens" in page.text_content("#counts")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "playground-encode.png"), full_page=True)


def test_conversion_error_is_shown_as_the_api_returns_it(page) -> None:  # type: ignore[no-untyped-def]
    page.select_option("#example", "Invalid: temperature 3")
    page.click("#encode-btn")
    page.wait_for_selector("#encode-error:not([hidden])")
    text = page.text_content("#encode-error")
    assert "HTTP 400" in text and "Invalid temperature value, the valid range of temperature is [0, 2]" in text


def test_decode_tool_call_output_into_three_apis(page) -> None:  # type: ignore[no-untyped-def]
    page.select_option("#example", "Tools, thinking on")
    page.click("[data-tab=decode]")
    page.click("#decode-sample")
    page.click("#decode-btn")
    page.wait_for_function("document.getElementById('dec-chat').textContent.length > 0")
    chat = json.loads(page.text_content("#dec-chat"))
    call = chat["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    assert chat["choices"][0]["finish_reason"] == "tool_calls"
    messages = json.loads(page.text_content("#dec-messages"))
    assert [b["type"] for b in messages["content"]] == ["thinking", "tool_use"] and messages["stop_reason"] == "tool_use"
    responses = json.loads(page.text_content("#dec-responses"))
    assert any(item["type"] == "function_call" for item in responses["output"])
    assert "data: [DONE]" in page.text_content("#ev-chat")
    assert "event: message_stop" in page.text_content("#ev-messages")
    assert "event: response.completed" in page.text_content("#ev-responses")
    page.screenshot(path=str(ARTIFACTS / "playground-decode.png"), full_page=True)


def test_schema_report_and_validation(page) -> None:  # type: ignore[no-untyped-def]
    page.click("[data-tab=schema]")
    page.click("#validate-btn")
    page.wait_for_selector("#validity div")
    report = json.loads(page.text_content("#report"))
    assert "maxLength" in report["exact"] + report["post_checked"]
    rows = page.eval_on_selector_all("#validity div", "els => els.map(e => [e.className, e.textContent])")
    assert rows[0] == ["valid", "#0: valid"] and rows[1][0] == "invalid"
