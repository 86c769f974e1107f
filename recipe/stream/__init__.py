"""Model output → protocol events and complete responses for the three APIs.

`StreamProcessor(api, request, response_id=..., model=..., tokenizer=..., output_format=...)` is fed
backend updates (`Ready`, `TextUpdate`, `TokenUpdate`, `Finish`) and returns `Event`s; `Event.sse()` is
the SSE frame, `StreamProcessor.response()` the complete response (the accumulation of the events).
Bad backend input raises `StreamInputError`; `error_events(message)` closes the stream in the API's
own mid-stream error shape. `merge_choices` combines the complete Chat responses of `n > 1` choices.

Events equal the official `deepseek-recipe` stream processor's, event by event, for the same updates
(golden/transcripts, tests/stream).

Reasoning field: Chat Completions carries reasoning as `reasoning_content` (DeepSeek's API field and
the reference's; the `openai` SDK keeps it as an extra attribute), in deltas and in the complete
message, and reasoning-token logprobs under `logprobs.reasoning_content`. Clients written for vLLM-style
servers read `reasoning`; `reasoning_field="reasoning"` emits that spelling instead and `"both"` emits
both. Messages uses `thinking` blocks with a `signature`, Responses `reasoning` items with
`reasoning_text` parts. (Accepting `reasoning` as well as `reasoning_content` on assistant history
is conversion's part: recipe/protocols/chat.py.)
"""

from recipe.stream.choices import merge_choices
from recipe.stream.processor import StreamProcessor
from recipe.stream.responses_echo import responses_echo
from recipe.stream.sse import Event, render_sse
from recipe.stream.updates import Finish, Ready, StreamInputError, TextUpdate, TokenLogprob, TokenUpdate

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
