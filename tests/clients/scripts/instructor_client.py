"""instructor: `response_model` through OpenAI TOOLS and JSON_SCHEMA modes and Anthropic ANTHROPIC_TOOLS mode.

`python instructor_client.py BASE MODEL` prints one JSON object keyed by mode.
"""

import json
import sys

import anthropic
import instructor
import openai
from pydantic import BaseModel, Field

BASE, MODEL = sys.argv[1], sys.argv[2]


class Person(BaseModel):
    # Bounded, so the demo model's forced call always closes within max_tokens (a 135M model may run on).
    name: str = Field(max_length=24)
    age: int = Field(ge=0, le=150)


messages = [{"role": "user", "content": "Extract the person: John Smith is 30 years old."}]
out = {}
for mode in (instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA):
    client = instructor.from_openai(openai.OpenAI(base_url=BASE + "/v1", api_key="sk-clients", max_retries=0), mode=mode)
    person = client.chat.completions.create(model=MODEL, response_model=Person, messages=messages, max_tokens=160,
                                            temperature=0, max_retries=0)
    out[mode.value] = person.model_dump()
client = instructor.from_anthropic(anthropic.Anthropic(base_url=BASE, api_key="sk-clients", max_retries=0),
                                   mode=instructor.Mode.ANTHROPIC_TOOLS)
# The anthropic SDK of this environment (2.x) takes no `temperature` argument in messages.create: sent in the body.
person = client.messages.create(model=MODEL, response_model=Person, messages=messages, max_tokens=160, max_retries=0,
                                extra_body={"temperature": 0})
out["anthropic_tools"] = person.model_dump()
print(json.dumps(out))
