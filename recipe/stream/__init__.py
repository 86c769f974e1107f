"""Model output → protocol events and complete responses for the three APIs.

`StreamProcessor(api, request, response_id=..., model=..., tokenizer=..., output_format=...)` is fed
backend updates (`Ready`, `TextUpdate`, `TokenUpdate`, `Finish`) and returns `Event`s; `Event.sse()` is
the SSE frame, `StreamProcessor.response()` the complete response. `merge_choices` combines the
complete Chat responses of `n > 1` choices.
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
