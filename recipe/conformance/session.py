"""The HTTP side of a conformance run: one client, recorded exchanges, and a cache so checks share requests."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import orjson

from recipe.conformance.sse import SseEvent, parse_sse

Api = Literal["chat", "messages", "responses", "common"]
PATHS = {"chat": "/v1/chat/completions", "messages": "/v1/messages", "responses": "/v1/responses"}
EXCERPT = 600


@dataclass
class Exchange:
    """One request and what came back, kept as evidence."""

    method: str
    path: str
    request_body: Any
    status: int
    headers: dict[str, str]
    body: bytes
    elapsed_s: float
    error: str | None = None
    _json: Any = field(default=None, repr=False)
    _events: list[SseEvent] | None = field(default=None, repr=False)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "")

    @property
    def is_sse(self) -> bool:
        return self.content_type.startswith("text/event-stream")

    def json(self) -> Any:
        """The body as JSON, or None when it is not JSON."""
        if self._json is None and self.body:
            try:
                self._json = orjson.loads(self.body)
            except orjson.JSONDecodeError:
                self._json = None
        return self._json

    def events(self) -> list[SseEvent]:
        if self._events is None:
            self._events = parse_sse(self.body)
        return self._events

    def data_events(self) -> list[Any]:
        """The JSON payloads of the SSE events, in order, without `[DONE]` (non-JSON data is skipped)."""
        out = []
        for ev in self.events():
            if ev.is_done:
                continue
            try:
                out.append(ev.json())
            except ValueError:
                continue
        return out

    def evidence(self) -> dict[str, Any]:
        body = self.body.decode("utf-8", errors="replace")
        return {
            "request": {"method": self.method, "path": self.path, "body": _trim(self.request_body)},
            "status": self.status,
            "content_type": self.content_type,
            "excerpt": body[:EXCERPT] + ("…" if len(body) > EXCERPT else ""),
            **({"transport_error": self.error} if self.error else {}),
        }


def _trim(body: Any) -> Any:
    if isinstance(body, (bytes, str)) and len(body) > EXCERPT:
        return f"<{len(body)} bytes>"
    if isinstance(body, dict):
        text = orjson.dumps(body)
        if len(text) > 4 * EXCERPT:
            return f"<JSON body of {len(text)} bytes>"
    return body


class Session:
    """Talks to the server under test. `base_url` may or may not end in `/v1`."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base = base_url.rstrip("/")
        self.base_url = base[: -len("/v1")] if base.endswith("/v1") else base
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.client = httpx.Client(base_url=self.base_url, timeout=timeout_s, transport=transport)
        self._model = model
        self._cache: dict[str, Exchange] = {}
        self._memo: dict[str, Any] = {}
        self._key_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()  # guards the lock tables
        self._model_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self.requests_sent = 0

    def close(self) -> None:
        self.client.close()

    @property
    def model(self) -> str:
        """The model under test: `--model`, else the first id `/v1/models` lists."""
        with self._model_lock:
            return self._resolve_model()

    def _resolve_model(self) -> str:
        if self._model is None:
            ex = self.get("/v1/models")
            data = ex.json() if ex.status == 200 else None
            models = data.get("data") if isinstance(data, dict) else None
            if isinstance(models, list) and models and isinstance(models[0], dict) and "id" in models[0]:
                self._model = str(models[0]["id"])
            else:
                self._model = "default"
        return self._model

    def auth_headers(self, api: Api) -> dict[str, str]:
        if not self.api_key:
            return {}
        if api == "messages":
            return {"x-api-key": self.api_key, "anthropic-version": "2023-06-01"}
        return {"authorization": f"Bearer {self.api_key}"}

    def memo(self, key: str, make: Any) -> Any:
        """`make()` once per run under `key` (concurrent callers wait for the first); for SDK results."""
        with self._lock:
            key_lock = self._key_locks.setdefault(f"memo:{key}", threading.Lock())
        with key_lock:
            if key not in self._memo:
                self._memo[key] = make()
            return self._memo[key]

    def get(self, path: str, *, headers: dict[str, str] | None = None, api: Api = "common") -> Exchange:
        return self.send("GET", path, None, headers=headers, api=api)

    def post(
        self,
        api: Api,
        body: Any,
        *,
        path: str | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        cache_key: str | None = None,
    ) -> Exchange:
        """POST `body` (a dict is sent as JSON; bytes/str as they are) to the API's route.

        With `cache_key`, the request is sent once per run; concurrent checks wanting it wait for it.
        """
        if cache_key is None:
            return self._post(api, body, path, headers, auth)
        with self._lock:
            key_lock = self._key_locks.setdefault(cache_key, threading.Lock())
        with key_lock:
            if cache_key not in self._cache:
                self._cache[cache_key] = self._post(api, body, path, headers, auth)
            return self._cache[cache_key]

    def _post(self, api: Api, body: Any, path: str | None, headers: dict[str, str] | None, auth: bool) -> Exchange:
        hdrs = {"content-type": "application/json"}
        if api == "messages":
            hdrs["anthropic-version"] = "2023-06-01"
        if auth:
            hdrs.update(self.auth_headers(api))
        hdrs.update(headers or {})
        return self.send("POST", path or PATHS[api], body, headers=hdrs, api=api)

    def send(self, method: str, path: str, body: Any, *, headers: dict[str, str] | None, api: Api) -> Exchange:
        hdrs = dict(headers or {})
        if method == "GET":
            hdrs = {**self.auth_headers(api), **hdrs}
        content = orjson.dumps(body) if isinstance(body, (dict, list)) else body
        with self._count_lock:
            self.requests_sent += 1
        t0 = time.perf_counter()
        try:
            resp = self.client.request(method, path, content=content, headers=hdrs)
            return Exchange(
                method, path, body, resp.status_code, {k.lower(): v for k, v in resp.headers.items()},
                resp.content, time.perf_counter() - t0,
            )
        except httpx.HTTPError as exc:
            return Exchange(method, path, body, 0, {}, b"", time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}")
