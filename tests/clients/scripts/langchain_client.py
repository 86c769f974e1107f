"""LangChain: `ChatOpenAI` and `ChatAnthropic` invoke, stream, bind_tools (forced) and with_structured_output.

`python langchain_client.py BASE MODEL` prints one JSON object keyed by class and call.
"""

import json
import sys

from langchain_anthropic import ChatAnthropic
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

BASE, MODEL = sys.argv[1], sys.argv[2]


class Landmark(BaseModel):
    """Where a landmark stands."""

    # Bounded, so the demo model's forced call always closes within max_tokens (a 135M model may run on).
    city: str = Field(max_length=24)
    country: str = Field(max_length=24)


@tool
def get_weather(city: str) -> str:
    """The current weather of a city."""
    return f"It is sunny in {city}."


chats = {
    "openai": ChatOpenAI(model=MODEL, base_url=BASE + "/v1", api_key="sk-clients", max_tokens=160, temperature=0,
                         max_retries=0),
    "anthropic": ChatAnthropic(model=MODEL, base_url=BASE, api_key="sk-clients", max_tokens=160, temperature=0,
                               max_retries=0),
}
out = {}
question = "Where is the Eiffel tower?"
for kind, chat in chats.items():
    invoked = chat.invoke("Say hello in one word.")
    streamed = "".join(str(chunk.content) for chunk in chat.stream("Say hello in one word."))
    called = chat.bind_tools([get_weather], tool_choice="get_weather").invoke("What is the weather in Paris?")
    structured = chat.with_structured_output(Landmark).invoke(question)
    out[kind] = {
        "invoke": str(invoked.content),
        "stream": streamed,
        "tool_calls": [{"name": c["name"], "args": c["args"]} for c in called.tool_calls],
        "structured": structured.model_dump(),
    }
    if kind == "openai":
        by_tool = chat.with_structured_output(Landmark, method="function_calling").invoke(question)
        out[kind]["structured_function_calling"] = by_tool.model_dump()
print(json.dumps(out))
