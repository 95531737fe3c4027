// Records OpenInference's LangChain.js instrumentation (@arizeai/openinference-instrumentation-
// langchain) of a LangChain.js v1 agent (`createAgent`, a LangGraph.js graph) with ChatOpenAI on
// the scripted four-call weather run into traces.jsonl, OTLP/JSON lines as the collector's file
// exporter writes them. Run by record.sh; see README.md.
import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { LangChainInstrumentation } from '@arizeai/openinference-instrumentation-langchain';
import * as CallbackManagerModule from '@langchain/core/callbacks/manager';
import { tool } from '@langchain/core/tools';
import { ChatOpenAI } from '@langchain/openai';
import { JsonTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { createAgent } from 'langchain';
import { z } from 'zod';

const here = dirname(fileURLToPath(import.meta.url));
const TRACES = join(here, 'traces.jsonl');
// scripted_openai.PROMPT and FINAL_ANSWER, read from the server's module.
const [PROMPT, FINAL_ANSWER] = JSON.parse(execFileSync('python3', ['-c',
  'import json, scripted_openai as s; print(json.dumps([s.PROMPT, s.FINAL_ANSWER]))'],
  { cwd: join(here, '..'), encoding: 'utf8' }));

// --- the exporter: OTLP/JSON lines like otel_tooleval.OTLPJsonFileExporter writes them --------
const INT64 = new Set(['startTimeUnixNano', 'endTimeUnixNano', 'timeUnixNano', 'intValue']);
const DEFAULTED = new Set(['droppedAttributesCount', 'droppedEventsCount', 'droppedLinksCount',
  'events', 'links', 'code']);

function asCollectorWrites(node) {
  // OTLP/JSON writes 64-bit integers as strings (the JS serializer leaves intValue a number),
  // and the collector leaves out fields at their default (0, [], a status code of 0).
  if (Array.isArray(node)) return node.forEach(asCollectorWrites);
  if (node && typeof node === 'object') {
    for (const [key, value] of Object.entries(node)) {
      if (INT64.has(key) && typeof value === 'number') node[key] = String(value);
      else if (DEFAULTED.has(key) && (value === 0 || (Array.isArray(value) && !value.length))) {
        delete node[key];
      } else asCollectorWrites(value);
    }
  }
}

class OTLPJsonFileExporter {
  constructor(path) {
    this.path = path;
  }

  export(spans, done) {
    const request = JSON.parse(new TextDecoder().decode(JsonTraceSerializer.serializeRequest(spans)));
    asCollectorWrites(request);
    appendFileSync(this.path, JSON.stringify(request) + '\n');
    done({ code: 0 }); // ExportResultCode.SUCCESS
  }

  shutdown() {
    return Promise.resolve();
  }

  forceFlush() {
    return Promise.resolve();
  }
}

// --- the scripted model: ../scripted_openai.py on a free port, its request log on stderr -------
function startScriptedServer() {
  const server = spawn('python3', [join(here, '..', 'scripted_openai.py'), '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const requests = [];
  createInterface({ input: server.stderr }).on('line', (line) => {
    if (line.includes('"POST ')) requests.push(line);
    else process.stderr.write(line + '\n');
  });
  const baseURL = new Promise((resolve, reject) => {
    server.once('exit', (code) => reject(new Error(`scripted_openai.py exited with ${code}`)));
    createInterface({ input: server.stdout }).once('line', (line) => {
      const url = /(http:\/\/127\.0\.0\.1:\d+\/v1)/.exec(line);
      if (url) resolve(url[1]);
      else reject(new Error(`unexpected first line from scripted_openai.py: ${line}`));
    });
  });
  return { server, requests, baseURL };
}

// --- the three tools, as scripted_openai.py defines them ---------------------------------------
const lookupCity = tool(
  async ({ query }) =>
    query.trim().toLowerCase().replace(/(^|[^a-z])([a-z])/g, (_, pre, c) => pre + c.toUpperCase()),
  {
    name: 'lookup_city',
    description: 'Resolve a free-text place query to a canonical city name.',
    schema: z.object({ query: z.string() }),
  },
);

const getWeather = tool(
  async ({ city }) => ({ city, temp_c: { Paris: 21.0, Lyon: 18.0 }[city] ?? null }),
  {
    name: 'get_weather',
    description: 'Return the current weather for a city (temperature in Celsius).',
    schema: z.object({ city: z.string() }),
  },
);

const convertTemp = tool(
  async ({ celsius }) => Math.round((celsius * 9 / 5 + 32) * 10) / 10,
  {
    name: 'convert_temp',
    description: 'Convert a temperature from Celsius to Fahrenheit.',
    schema: z.object({ celsius: z.number() }),
  },
);

// --- the run ------------------------------------------------------------------------------------
async function main() {
  rmSync(TRACES, { force: true });
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'langgraph-js-weather' }),
    spanProcessors: [new SimpleSpanProcessor(new OTLPJsonFileExporter(TRACES))],
  });
  provider.register(); // the global tracer provider and the AsyncLocalStorage context manager
  // OpenInference's documented set-up for ES modules: patch @langchain/core's callback manager.
  const instrumentation = new LangChainInstrumentation();
  instrumentation.manuallyInstrument(CallbackManagerModule);

  const { server, requests, baseURL } = startScriptedServer();
  try {
    const model = new ChatOpenAI({
      model: 'scripted',
      apiKey: 'scripted',
      configuration: { baseURL: await baseURL },
    });
    const agent = createAgent({
      model,
      tools: [lookupCity, getWeather, convertTemp],
      name: 'weather_agent',
    });
    const result = await agent.invoke({ messages: [{ role: 'user', content: PROMPT }] });
    const answer = String(result.messages.at(-1).content).trim();
    await provider.forceFlush();
    await provider.shutdown();

    const problems = [];
    if (answer !== FINAL_ANSWER) problems.push(`final answer ${JSON.stringify(answer)}`);
    if (requests.length !== 4) problems.push(`${requests.length} model requests, not 4`);
    if (!existsSync(TRACES)) problems.push('no traces.jsonl');
    if (problems.length) throw new Error(problems.join('; '));
    console.log(`recorded ${requests.length} model requests: ${answer} -> ${TRACES}`);
  } finally {
    server.kill();
  }
}

await main();
