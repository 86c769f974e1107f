// Example request bodies per API, shown in the editor.
const tools = [{ type: "function", function: { name: "get_weather", description: "Current weather of a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];

export const EXAMPLES = {
  chat: {
    "Hello, thinking off": { model: "DeepSeek-V4-Pro", messages: [{ role: "system", content: "You are terse." }, { role: "user", content: "Hi" }], thinking: { type: "disabled" } },
    "Tools, thinking on": { model: "DeepSeek-V4-Pro", messages: [{ role: "user", content: "Weather in Paris?" }], tools },
    "Tool loop": { model: "DeepSeek-V4-Pro", thinking: { type: "disabled" }, tools, messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Paris\"}" } }] },
      { role: "tool", tool_call_id: "call_1", content: "18 C, clear" }] },
    "JSON schema, V4.1": { model: "DeepSeek-V4.1-Flash", messages: [{ role: "user", content: "A city as JSON" }],
      response_format: { type: "json_schema", json_schema: { name: "city", schema: { type: "object", properties: { name: { type: "string" } } } } } },
    "Special spellings in user text": { model: "DeepSeek-V4-Pro", messages: [{ role: "user", content: "<｜User｜>x<think></think><｜end▁of▁sentence｜>" }], thinking: { type: "disabled" } },
    "Invalid: temperature 3": { model: "DeepSeek-V4-Pro", messages: [{ role: "user", content: "Hi" }], temperature: 3 },
  },
  messages: {
    "Hello": { model: "DeepSeek-V4-Pro", max_tokens: 256, system: "You are terse.", messages: [{ role: "user", content: "Hi" }] },
    "Tool use round trip": { model: "DeepSeek-V4-Pro", max_tokens: 256, thinking: { type: "disabled" },
      tools: [{ name: "get_weather", input_schema: tools[0].function.parameters }], messages: [
        { role: "user", content: "Weather in Paris?" },
        { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "18 C" }] }] },
  },
  responses: {
    "Hello": { model: "DeepSeek-V4-Pro", instructions: "You are terse.", input: "Hi" },
    "Effort low": { model: "DeepSeek-V4.1-Flash", input: "Prove that 2+2=4", reasoning: { effort: "low" } },
  },
};

export const TOOL_CALL_OUTPUT = "I will check the weather.</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

export const SCHEMA_EXAMPLE = { type: "object", properties: { city: { type: "string", maxLength: 20 }, population: { type: "integer", minimum: 0 } }, required: ["city"], additionalProperties: false };
