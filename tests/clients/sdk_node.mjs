// The router as openai-node sees it. Run by tests/tests/e2e/client_sdks.rs:
//
//     node sdk_node.mjs BASE_URL SCENARIO.json
//
// Every check throws on a mismatch; the last line printed is a JSON summary for the harness.

import { readFileSync } from "node:fs";
import OpenAI from "openai";

const [base, scenarioPath] = process.argv.slice(2);
const sc = JSON.parse(readFileSync(scenarioPath, "utf8"));
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", timeout: 60_000 });
const messages = [{ role: "user", content: "hello" }];
const summary = { failed_loads: 0, cancelled: 0 };

function check(condition, what) {
  if (!condition) throw new Error(what);
}

async function contentOf(stream) {
  let text = "";
  for await (const chunk of stream) {
    for (const choice of chunk.choices) text += choice.delta?.content ?? "";
  }
  return text;
}

const ids = [];
for await (const model of client.models.list()) ids.push(model.id);
check(ids.includes(sc.concrete) && ids.includes(sc.alias), `models.list: ${ids}`);

for (const model of [sc.concrete, sc.alias]) {
  const reply = await client.chat.completions.create({ model, messages });
  check(reply.choices[0].message.content, `non-stream ${model}`);
  const stream = await client.chat.completions.create({ model, messages, stream: true });
  check(await contentOf(stream), `stream ${model}`);
}

for (const tier of ["priority", "flex"]) {
  const { data, response } = await client.chat.completions
    .create({ model: sc.alias, messages, service_tier: tier })
    .withResponse();
  check(response.headers.get("x-strata-request-id"), "x-strata-request-id");
  check(response.headers.get("x-strata-concrete-model") === sc.concrete, "concrete model");
  check(response.headers.get("x-strata-service-tier") === tier, `tier ${tier}`);
  check(data.choices.length > 0, "parsed reply");
}

{
  const stream = await client.chat.completions.create({
    model: sc.concrete,
    messages,
    stream: true,
    fake: { tool_call: true },
  });
  let calls = 0;
  let finish = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      calls += choice.delta?.tool_calls?.length ?? 0;
      finish = choice.finish_reason ?? finish;
    }
  }
  check(calls > 0 && finish === "tool_calls", `tool calls ${calls} ${finish}`);
}

try {
  await client.chat.completions.create({
    model: sc.concrete,
    messages,
    stream: true,
    fake: { error_status: 400 },
  });
  throw new Error("an upstream 400 must throw");
} catch (err) {
  check(err instanceof OpenAI.BadRequestError && err.status === 400, `400: ${err}`);
}

try {
  const stream = await client.chat.completions.create({ model: sc.broken, messages, stream: true });
  await contentOf(stream);
  throw new Error("a failed load must throw");
} catch (err) {
  check(err instanceof OpenAI.InternalServerError && err.status === 503, `503: ${err}`);
}
summary.failed_loads += 1;

try {
  const stream = await client.chat.completions.create({ model: sc.broken_slow, messages, stream: true });
  await contentOf(stream);
  throw new Error("a failed load after the headers must throw");
} catch (err) {
  check(err instanceof OpenAI.APIError, `APIError: ${err}`);
  check(err.status === undefined && err.error?.status === 503, `in-band status: ${JSON.stringify(err.error)}`);
}
summary.failed_loads += 1;

{
  const stream = await client.chat.completions.create({ model: sc.slow, messages, stream: true });
  check(await contentOf(stream), "stream through a slow load");
}

{
  const stream = await client.chat.completions.create({
    model: sc.concrete,
    messages,
    stream: true,
    fake: { tokens: 40, token_delay_ms: 50 },
  });
  for await (const _chunk of stream) break;
  summary.cancelled += 1;
  const reply = await client.chat.completions.create({ model: sc.concrete, messages });
  check(reply.choices[0].message.content, "after a cancel");
}

console.log(JSON.stringify(summary));
