"""LiteLLM as a client: `completion` through its OpenAI and Anthropic providers, plain and streamed.

`python litellm_client.py BASE MODEL` prints one JSON object keyed by provider.
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price list at import

import litellm

BASE, MODEL = sys.argv[1], sys.argv[2]
messages = [{"role": "user", "content": "Say hello in one word."}]
out = {}
for provider, base in (("openai", BASE + "/v1"), ("anthropic", BASE)):
    kwargs = {"model": f"{provider}/{MODEL}", "api_base": base, "api_key": "sk-clients", "messages": messages,
              "max_tokens": 24, "temperature": 0}
    done = litellm.completion(**kwargs)
    chunks = litellm.completion(**kwargs, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks)
    out[provider] = {"text": done.choices[0].message.content, "finish": done.choices[0].finish_reason,
                     "completion_tokens": done.usage.completion_tokens, "stream": streamed}
print(json.dumps(out))
