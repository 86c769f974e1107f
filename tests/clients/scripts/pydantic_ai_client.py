"""pydantic-ai: structured `output_type` through the OpenAI Chat, OpenAI Responses and Anthropic model classes.

`python pydantic_ai_client.py BASE MODEL` prints one JSON object: per model class, the validated output
(pydantic-ai's default tool output: a forced `final_result` tool call).
"""

import json
import sys

from pydantic import BaseModel, Field
from pydantic_ai import Agent
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.anthropic import AnthropicProvider
from pydantic_ai.providers.openai import OpenAIProvider

BASE, MODEL = sys.argv[1], sys.argv[2]


class Landmark(BaseModel):
    # Bounded, so the demo model's forced call always closes within max_tokens (a 135M model may run on).
    city: str = Field(max_length=24)
    country: str = Field(max_length=24)


openai_provider = OpenAIProvider(base_url=BASE + "/v1", api_key="sk-clients")
models = {
    "chat": OpenAIChatModel(MODEL, provider=openai_provider),
    "responses": OpenAIResponsesModel(MODEL, provider=openai_provider),
    "anthropic": AnthropicModel(MODEL, provider=AnthropicProvider(base_url=BASE, api_key="sk-clients")),
}
out = {}
for kind, model in models.items():
    agent = Agent(model, output_type=Landmark, model_settings={"max_tokens": 160, "temperature": 0})
    result = agent.run_sync("Where is the Eiffel tower? Give the city and the country.")
    out[kind] = result.output.model_dump()
print(json.dumps(out))
