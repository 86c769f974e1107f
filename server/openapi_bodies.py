"""The request bodies of `/openapi.json`: the routes read raw bodies (conversion words errors as the
reference does), so FastAPI cannot see their shapes; they come from the pydantic models of
`recipe.protocols.request_models` instead, plus the small `/tokenize` and `/detokenize` bodies."""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from recipe.protocols.request_models import ChatCompletionRequest, MessagesRequest, ResponsesRequest

REF = "#/components/schemas/{model}"

# POST path -> component name of its body
BODY_OF = {
    "/v1/chat/completions": "ChatCompletionRequest",
    "/v1/messages": "MessagesRequest",
    "/v1/messages/count_tokens": "MessagesCountTokensRequest",
    "/v1/responses": "ResponsesRequest",
    "/tokenize": "TokenizeRequest",
    "/detokenize": "DetokenizeRequest",
}

_SMALL_BODIES: dict[str, dict[str, Any]] = {
    "TokenizeRequest": {
        "type": "object", "title": "TokenizeRequest",
        "description": "vLLM's /tokenize: a plain `prompt`, or Chat `messages` rendered as the model's prompt.",
        "properties": {
            "model": {"type": "string"},
            "prompt": {"type": "string"},
            "messages": {"type": "array", "items": {"$ref": REF.format(model="ChatMessage")}},
            "add_special_tokens": {"type": "boolean"},
            "return_token_strs": {"type": "boolean"},
        },
    },
    "DetokenizeRequest": {
        "type": "object", "title": "DetokenizeRequest", "required": ["tokens"],
        "properties": {"model": {"type": "string"}, "tokens": {"type": "array", "items": {"type": "integer"}}},
    },
}


def request_body_schemas() -> dict[str, Any]:
    """Component schemas of every request body (and the models they refer to), keyed by name."""
    _, top = models_json_schema(
        [(m, "validation") for m in (ChatCompletionRequest, MessagesRequest, ResponsesRequest)], ref_template=REF
    )
    schemas: dict[str, Any] = dict(top["$defs"])
    count = copy.deepcopy(schemas["MessagesRequest"])
    count["title"] = "MessagesCountTokensRequest"
    count["description"] = "Anthropic count_tokens request body: a Messages request without `max_tokens`."
    count["properties"].pop("max_tokens", None)
    count["properties"].pop("stream", None)
    schemas["MessagesCountTokensRequest"] = count
    schemas.update(copy.deepcopy(_SMALL_BODIES))
    return schemas


def install(app: FastAPI) -> None:
    """Make `app.openapi()` document the JSON body of every POST route in `BODY_OF`."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        doc.setdefault("components", {}).setdefault("schemas", {}).update(request_body_schemas())
        for path, name in BODY_OF.items():
            op = doc["paths"].get(path, {}).get("post")
            if op is not None:
                op["requestBody"] = {"required": True, "content": {
                    "application/json": {"schema": {"$ref": REF.format(model=name)}}}}
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]
