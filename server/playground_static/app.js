// The playground page: encode requests, decode model output, generate, and check schemas.
import { EXAMPLES, SCHEMA_EXAMPLE, TOOL_CALL_OUTPUT } from "./examples.js";

const $ = (id) => document.getElementById(id);
const state = { info: { generate: false, models: [] } };

async function post(path, payload) {
  const res = await fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(payload) });
  const data = await res.json();
  if (!res.ok) throw new Error(data?.error?.message || `HTTP ${res.status}`);
  return data;
}

function requestBody() {
  const text = $("request").value;
  try { return JSON.parse(text); } catch { return text; } // a non-JSON body is sent as text: the API's parse error shows
}

function fillExamples() {
  const api = $("api").value;
  const select = $("example");
  select.replaceChildren(...Object.keys(EXAMPLES[api]).map((name) => new Option(name, name)));
  showExample();
}

function showExample() {
  const body = EXAMPLES[$("api").value][$("example").value];
  $("request").value = JSON.stringify(body, null, 2);
}

function renderPrompt(prompt, ranges) {
  // ranges are code-point offsets: index the prompt as an array of code points
  const cps = Array.from(prompt);
  const out = document.createDocumentFragment();
  let at = 0;
  for (const [start, end] of ranges) {
    if (start > at) out.append(cps.slice(at, start).join(""));
    const span = document.createElement("span");
    span.className = "special";
    span.textContent = cps.slice(start, end).join("");
    out.append(span);
    at = end;
  }
  if (at < cps.length) out.append(cps.slice(at).join(""));
  $("prompt").replaceChildren(out);
}

function renderIds(tokens) {
  $("ids").replaceChildren(...tokens.map((t) => {
    const span = document.createElement("span");
    span.textContent = String(t.id);
    span.title = t.text;
    span.dataset.id = String(t.id);
    if (t.special) span.className = "special";
    return span;
  }));
}

function showError(el, error) {
  el.hidden = false;
  el.textContent = `HTTP ${error.status}\n${JSON.stringify(error.body, null, 2)}`;
}

async function encode() {
  $("encode-error").hidden = true;
  $("status").textContent = "encoding…";
  try {
    const data = await post("/playground/api/encode", { api: $("api").value, body: requestBody(), version: $("version").value });
    if (data.error) {
      showError($("encode-error"), data.error);
      $("prompt").replaceChildren(); $("ids").replaceChildren(); $("counts").textContent = "";
    } else {
      renderPrompt(data.prompt, data.special_ranges);
      renderIds(data.tokens);
      const c = data.counts;
      $("counts").textContent = `model version ${data.model_version} · ${c.characters} characters · ${c.tokens ?? "–"} tokens · ${c.special_tokens} special tokens`;
      $("note").textContent = data.note || "";
    }
    $("status").textContent = "done";
  } catch (err) {
    $("status").textContent = `error: ${err.message}`;
  }
}

async function decode() {
  $("decode-error").hidden = true;
  $("status").textContent = "decoding…";
  try {
    const data = await post("/playground/api/decode", {
      api: $("api").value, body: requestBody(), version: $("version").value,
      output: $("output").value, kind: $("decode-kind").value, finish: $("decode-finish").value,
    });
    if (data.error) {
      showError($("decode-error"), data.error);
    } else {
      for (const api of ["chat", "messages", "responses"]) {
        $(`dec-${api}`).textContent = JSON.stringify(data[api].response, null, 2);
        $(`ev-${api}`).textContent = data[api].events.join("");
      }
    }
    $("status").textContent = "done";
  } catch (err) {
    $("status").textContent = `error: ${err.message}`;
  }
}

async function generate() {
  const api = $("api").value;
  const body = requestBody();
  if (typeof body !== "object") { $("gen-out").textContent = "the request is not JSON"; return; }
  body.model = state.info.models[0];
  body.stream = true;
  const path = { chat: "/v1/chat/completions", messages: "/v1/messages", responses: "/v1/responses" }[api];
  const headers = { "content-type": "application/json" };
  const key = $("gen-key").value;
  if (key) headers.authorization = `Bearer ${key}`;
  $("gen-out").textContent = ""; $("gen-events").textContent = ""; $("gen-stats").textContent = "";
  const t0 = performance.now();
  let first = null; let pieces = 0;
  const res = await fetch(path, { method: "POST", headers, body: JSON.stringify(body) });
  if (!res.ok || !res.body) { $("gen-out").textContent = await res.text(); return; }
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const frame = buf.slice(0, cut); buf = buf.slice(cut + 2);
      $("gen-events").textContent += frame + "\n\n";
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trim()).join("\n");
      if (!data || data === "[DONE]") continue;
      const text = deltaText(api, JSON.parse(data));
      if (text) {
        if (first === null) first = performance.now();
        pieces += 1;
        $("gen-out").textContent += text;
      }
    }
    const elapsed = (performance.now() - t0) / 1000;
    const ttft = first === null ? "–" : `${((first - t0) / 1000).toFixed(3)} s`;
    $("gen-stats").textContent = `TTFT ${ttft} · ${pieces} deltas · ${(pieces / Math.max(elapsed, 1e-3)).toFixed(1)} deltas/s`;
  }
}

function deltaText(api, ev) {
  if (api === "chat") return (ev.choices || []).map((c) => (c.delta && (c.delta.content || c.delta.reasoning_content)) || "").join("");
  if (api === "messages") return ev.type === "content_block_delta" ? (ev.delta.text || ev.delta.thinking || ev.delta.partial_json || "") : "";
  return ev.type && ev.type.endsWith(".delta") ? (ev.delta || "") : "";
}

async function validate() {
  let schema;
  try { schema = JSON.parse($("schema").value); } catch (err) { $("report").textContent = `schema is not JSON: ${err.message}`; return; }
  const outputs = $("outputs").value.split("\n").filter((l) => l.trim());
  const data = await post("/playground/api/validate", { schema, outputs });
  $("report").textContent = JSON.stringify(data.report, null, 2);
  $("validity").replaceChildren(...data.outputs.map((o) => {
    const div = document.createElement("div");
    div.className = o.errors.length ? "invalid" : "valid";
    div.textContent = `#${o.index}: ${o.errors.length ? o.errors.join("; ") : "valid"}`;
    return div;
  }));
}

function switchTab(name) {
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === name);
  for (const p of document.querySelectorAll("[data-panel]")) p.hidden = p.dataset.panel !== name;
}

async function init() {
  for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => switchTab(b.dataset.tab));
  $("api").addEventListener("change", fillExamples);
  $("example").addEventListener("change", showExample);
  $("encode-btn").addEventListener("click", encode);
  $("decode-btn").addEventListener("click", decode);
  $("decode-sample").addEventListener("click", () => { $("decode-kind").value = "text"; $("output").value = TOOL_CALL_OUTPUT; });
  $("gen-btn").addEventListener("click", generate);
  $("validate-btn").addEventListener("click", validate);
  $("schema").value = JSON.stringify(SCHEMA_EXAMPLE, null, 2);
  $("outputs").value = '{"city": "Paris", "population": 2100000}\n{"city": 3}';
  fillExamples();
  const res = await fetch("/playground/api/info");
  state.info = await res.json();
  $("gen-model").textContent = state.info.generate ? `Model: ${state.info.models[0]}` : "No model is loaded (recipe playground): generation needs recipe serve.";
  $("gen-btn").disabled = !state.info.generate;
  document.body.dataset.ready = "1";
}

init();
