"""The fast slice of the API fuzzing (`bench/fuzz.py` runs the full one): hypothesis drives the body
generator of `bench/fuzz_bodies.py` (OpenAPI-schema draws, mutations of the golden corpus, broken JSON
text) and every answer must be the API's error shape or a valid response, never a 5xx or a trace."""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recipe.server.app import create_app
from recipe.server.backend import EchoBackend, echo_model_card
from recipe.server.config import ServerConfig
from recipe.server.openapi_bodies import BODY_OF
from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))
import fuzz_bodies as fb  # noqa: E402


@pytest.fixture(scope="module")
def app_client() -> TestClient:
    backend = EchoBackend(model=echo_model_card("echo", context_length=4096), chunk=16)
    return TestClient(create_app(ServerConfig(served_model_names=("echo",)), backend), raise_server_exceptions=False)


@pytest.fixture(scope="module")
def openapi(app_client: TestClient) -> dict[str, Any]:
    return app_client.get("/openapi.json").json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def maker(openapi: dict[str, Any]) -> fb.CaseMaker:
    return fb.CaseMaker(openapi["components"]["schemas"], fb.load_seeds(), "echo")


def test_every_post_route_documents_its_request_body(openapi: dict[str, Any]) -> None:
    for path in BODY_OF:
        body = openapi["paths"][path]["post"]["requestBody"]
        ref = body["content"]["application/json"]["schema"]["$ref"]
        name = ref.rsplit("/", 1)[1]
        assert body["required"] and name in openapi["components"]["schemas"], path
    assert "max_tokens" not in openapi["components"]["schemas"]["MessagesCountTokensRequest"]["properties"]


def test_the_corpus_valid_requests_validate_against_the_openapi_bodies(openapi: dict[str, Any]) -> None:
    validators = {api: jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{fb.SCHEMA_OF[api]}",
                                                        "components": openapi["components"]})
                  for api in fb.APIS}
    checked = 0
    with gzip.open(ROOT / "golden" / "requests.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row["intended_valid"] and row.get("conversation") is not None:
                validators[row["api"]].validate(json.loads(row["request"]))
                checked += 1
    assert checked > 1000


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(rnd=st.randoms(use_true_random=False), api=st.sampled_from(fb.APIS), stream=st.booleans())
def test_fuzzed_bodies_get_the_error_shape_or_a_valid_response(
    app_client: TestClient, maker: fb.CaseMaker, rnd: random.Random, api: str, stream: bool
) -> None:
    case = maker.case(api, rnd)
    body = case.body
    if stream and body.startswith(b"{") and not case.how.startswith("text"):
        body = body.replace(b"{", b'{"stream": true, ', 1)
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    r = app_client.post(case.path, content=body, headers=headers)
    problem = fb.check_answer(api, r.status_code, r.headers.get("content-type", ""), r.content)
    assert problem is None, (problem, case.how, body[:400], r.content[:400])


def test_the_server_is_healthy_after_the_fuzzing(app_client: TestClient) -> None:
    assert app_client.get("/health").status_code == 200
    assert app_client.app.state.recipe.pipeline.admission.pending == 0  # type: ignore[attr-defined]
