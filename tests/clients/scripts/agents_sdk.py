"""OpenAI Agents SDK: a function tool on the Responses and the Chat Completions model classes.

`python agents_sdk.py BASE MODEL` prints one JSON object: per model class, the tool calls the agent ran
and its final output. tool_choice "required" forces the first call (the SDK resets it afterwards).
"""

import asyncio
import json
import sys

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

set_tracing_disabled(True)
BASE, MODEL = sys.argv[1], sys.argv[2]
CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The current weather of a city."""
    CALLS.append(city)
    return f"It is sunny in {city}."


async def main() -> None:
    client = AsyncOpenAI(base_url=BASE + "/v1", api_key="sk-clients", max_retries=0)
    out = {}
    models = {"responses": OpenAIResponsesModel(MODEL, client), "chat": OpenAIChatCompletionsModel(MODEL, client)}
    for kind, model in models.items():
        CALLS.clear()
        agent = Agent(name="weather", instructions="Answer with the weather tool.", tools=[get_weather], model=model,
                      model_settings=ModelSettings(tool_choice="required", parallel_tool_calls=False,
                                                   max_tokens=200, temperature=0))
        result = await Runner.run(agent, "What is the weather in Paris?", max_turns=4)
        out[kind] = {"calls": list(CALLS), "final": str(result.final_output),
                     "items": [item.type for item in result.new_items]}
    print(json.dumps(out))


asyncio.run(main())
