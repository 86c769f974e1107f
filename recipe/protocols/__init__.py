"""Request conversion, one module per API: `chat` (OpenAI Chat Completions), `messages` (Anthropic
Messages), `responses` (OpenAI Responses). Each has `parse(body) -> dict` and
`convert(parsed, ConversionOptions) -> ConversationRequest`; use them through `recipe.codec.convert`.

Parity. Conversion equals the official deepseek-recipe 0.2.0 on the golden set (golden/): the same
conversation, options, status and message for every body, including the reference's validation
order. Bodies are read with orjson and checked by hand-written readers (`body_fields`,
`json_syntax`) rather than pydantic models, because the error messages must be the reference's serde
and serde_json messages word for word (`invalid type: string "x", expected u32`, `expected ident at
line 1 column 2`), which pydantic's cannot be. Pydantic v2 models of the three bodies, for OpenAPI
and documentation, are in `request_models` (every body the reference converts validates against them).

Beyond the reference (documented divergences, the only ones):

* Chat `n` in [1, `ConversionOptions.max_n`] (default 16) → `InferenceOptions.n`; the reference
  accepts only 1. Outside the range: 400 `Invalid n value, the valid range of n is [1, 16]`.
* Chat `presence_penalty` / `frequency_penalty` → `InferenceOptions` (the reference checks, then drops them).
* Chat `stream_options.include_usage` → `ConversationRequest.include_usage`.
* Responses `previous_response_id` (a string) → `ConversationRequest.previous_response_id`.
* Messages `top_k` → `InferenceOptions.top_k` (the reference ignores it).
* Error bodies take the shape of the API called (`RequestError.body(api)`); the reference answers
  every API with the OpenAI shape. Status and message are unchanged.
"""
