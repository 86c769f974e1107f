"""The pydantic request models describe what conversion accepts: every golden body the official
reference converts validates against its API's model, and the models give JSON Schemas."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from recipe.protocols.request_models import REQUEST_MODELS


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_every_converted_golden_body_validates(golden: list[dict[str, Any]], api: str) -> None:
    model = REQUEST_MODELS[api]
    bodies = [r["request"] for r in golden if r["api"] == api and "error" not in r]
    assert len(bodies) > 300
    for body in bodies:
        model.model_validate(orjson.loads(body))


@pytest.mark.parametrize("api", ["chat", "messages", "responses"])
def test_models_give_json_schemas(api: str) -> None:
    schema = REQUEST_MODELS[api].model_json_schema()
    assert "model" in schema["required"]
