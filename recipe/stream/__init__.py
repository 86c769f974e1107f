"""Model output → protocol events and complete responses for the three APIs.

`StreamProcessor(api, request, response_id=..., model=..., tokenizer=..., output_format=...)` is fed
backend updates (`Ready`, `TextUpdate`, `TokenUpdate`, `Finish`) and returns `Event`s; `Event.sse()` is
the SSE frame, `StreamProcessor.response()` the complete response (the accumulation of the events).
Bad backend input raises `StreamInputError`; `error_events(message)` closes the stream in the API's
own mid-stream error shape. `merge_choices` combines the complete Chat responses of `n > 1` choices.

Events equal the official `deepseek-recipe` stream processor's, event by event, for the same updates
(golden/transcripts, tests/stream).

The per-token modules load compiled by mypyc where a build for the current sources exists
(recipe.compiled_stream: same events and bytes; `use_compiled(False)` before this package is imported
keeps them pure Python).

Reasoning field: Chat Completions carries reasoning as `reasoning_content` (DeepSeek's API field and
the reference's; the `openai` SDK keeps it as an extra attribute), in deltas and in the complete
message, and reasoning-token logprobs under `logprobs.reasoning_content`. Clients written for vLLM-style
servers read `reasoning`; `reasoning_field="reasoning"` emits that spelling instead and `"both"` emits
both. Messages uses `thinking` blocks with a `signature`, Responses `reasoning` items with
`reasoning_text` parts. (Accepting `reasoning` as well as `reasoning_content` on assistant history
is conversion's part: recipe/protocols/chat.py.)
"""

from recipe import compiled_stream

compiled_stream.install()  # before any module of this package loads: the compiled ones, where built

from recipe.stream.choices import merge_choices  # noqa: E402
from recipe.stream.processor import StreamProcessor  # noqa: E402
from recipe.stream.responses_echo import responses_echo  # noqa: E402
from recipe.stream.sse import Event, render_sse  # noqa: E402
from recipe.stream.updates import (  # noqa: E402
    Finish,
    Ready,
    StreamInputError,
    TextUpdate,
    TokenLogprob,
    TokenUpdate,
)

__all__ = [
    "Event",
    "Finish",
    "Ready",
    "StreamInputError",
    "StreamProcessor",
    "TextUpdate",
    "TokenLogprob",
    "TokenUpdate",
    "merge_choices",
    "render_sse",
    "responses_echo",
]
