// Drives a tpcoord job with the official openai npm client: structured
// outputs (response_format json_schema) and tool calling (tool_choice
// required and named, streamed and not). It prints one JSON line per case
// for e2e/openainode_test.go to check; it checks nothing itself.
// Environment: OPENAI_BASE_URL (the job's /v1 URL), OPENAI_API_KEY.
import { readFileSync } from "node:fs";
import OpenAI from "openai";

const client = new OpenAI({ maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const out = (v) => process.stdout.write(JSON.stringify(v) + "\n");

// The schemas e2e/openainode_test.go validates the answers with.
const { person, tools } = JSON.parse(readFileSync(new URL("./schemas.json", import.meta.url), "utf8"));
const messages = [{ role: "user", content: "What is the weather in Oslo for three days?" }];

for (const seed of [1, 2, 3]) {
  const r = await client.chat.completions.create({
    model, seed, max_tokens: 400, messages: [{ role: "user", content: "A person, please." }],
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } },
  });
  out({ case: "json_schema", seed, finish: r.choices[0].finish_reason, content: r.choices[0].message.content });
}

for (const seed of [4, 5, 6]) {
  const r = await client.chat.completions.create({ model, seed, max_tokens: 400, messages, tools, tool_choice: "required" });
  const m = r.choices[0].message;
  out({ case: "required", seed, finish: r.choices[0].finish_reason, content: m.content ?? null,
    calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments })) });
}

// Streamed: the deltas are gathered by index, as an agent framework does.
for (const [seed, choice] of [[7, "required"], [8, { type: "function", function: { name: "get_weather" } }]]) {
  const stream = await client.chat.completions.create({ model, seed, max_tokens: 400, messages, tools, tool_choice: choice, stream: true });
  const calls = [];
  let finish = null;
  let content = "";
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    content += c.delta?.content ?? "";
    for (const d of c.delta?.tool_calls ?? []) {
      calls[d.index] ??= { id: "", type: "", name: "", arguments: "" };
      const call = calls[d.index];
      call.id += d.id ?? "";
      call.type += d.type ?? "";
      call.name += d.function?.name ?? "";
      call.arguments += d.function?.arguments ?? "";
    }
    finish = c.finish_reason ?? finish;
  }
  out({ case: typeof choice === "string" ? "required-stream" : "named-stream", seed, finish, content, calls });
}

// The SDK's own stream helper, which assembles the message itself.
const runner = client.chat.completions.stream({ model, seed: 9, max_tokens: 400, messages, tools, tool_choice: "required" });
const final = await runner.finalChatCompletion();
const fm = final.choices[0].message;
out({ case: "stream-helper", seed: 9, finish: final.choices[0].finish_reason, content: fm.content ?? null,
  calls: (fm.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name, arguments: c.function.arguments })) });
