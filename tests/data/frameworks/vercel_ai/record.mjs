// Records the Vercel AI SDK's own OpenTelemetry spans (the @ai-sdk/otel integration) of the
// scripted four-call weather run into traces.jsonl, OTLP/JSON lines as the collector's file
// exporter writes them. `node record.mjs legacy` records the LegacyOpenTelemetry integration's
// `ai.*` spans into legacy/traces.jsonl instead. Run by record.sh; see README.md.
import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, existsSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { LegacyOpenTelemetry, OpenTelemetry } from '@ai-sdk/otel';
import { JsonTraceSerializer } from '@opentelemetry/otlp-transformer';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { NodeTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-node';
import { generateText, isStepCount, registerTelemetry, tool } from 'ai';
import { z } from 'zod';

const here = dirname(fileURLToPath(import.meta.url));
const LEGACY = process.argv[2] === 'legacy';
const TRACES = join(here, ...(LEGACY ? ['legacy'] : []), 'traces.jsonl');
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
const lookupCity = tool({
  description: 'Resolve a free-text place query to a canonical city name.',
  inputSchema: z.object({ query: z.string() }),
  execute: async ({ query }) =>
    query.trim().toLowerCase().replace(/(^|[^a-z])([a-z])/g, (_, pre, c) => pre + c.toUpperCase()),
});

const getWeather = tool({
  description: 'Return the current weather for a city (temperature in Celsius).',
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => ({ city, temp_c: { Paris: 21.0, Lyon: 18.0 }[city] ?? null }),
});

const convertTemp = tool({
  description: 'Convert a temperature from Celsius to Fahrenheit.',
  inputSchema: z.object({ celsius: z.number() }),
  execute: async ({ celsius }) => Math.round((celsius * 9 / 5 + 32) * 10) / 10,
});

// --- the run ------------------------------------------------------------------------------------
async function main() {
  rmSync(TRACES, { force: true });
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ 'service.name': 'vercel-ai-weather' }),
    spanProcessors: [new SimpleSpanProcessor(new OTLPJsonFileExporter(TRACES))],
  });
  provider.register(); // the global tracer provider and the AsyncLocalStorage context manager
  // The AI SDK docs' set-up: @ai-sdk/otel's GenAI spans, or the ai.* spans of AI SDK 6 and before.
  registerTelemetry(LEGACY ? new LegacyOpenTelemetry() : new OpenTelemetry());

  const { server, requests, baseURL } = startScriptedServer();
  try {
    const scripted = createOpenAICompatible({
      name: 'scripted',
      baseURL: await baseURL,
      apiKey: 'scripted',
    });
    const result = await generateText({
      model: scripted.chatModel('scripted'),
      tools: { lookup_city: lookupCity, get_weather: getWeather, convert_temp: convertTemp },
      stopWhen: isStepCount(4),
      prompt: PROMPT,
      telemetry: {
        isEnabled: true,
        functionId: 'weather_agent',
        recordInputs: true,
        recordOutputs: true,
      },
    });
    await provider.forceFlush();
    await provider.shutdown();

    const problems = [];
    if (result.text !== FINAL_ANSWER) problems.push(`final answer ${JSON.stringify(result.text)}`);
    if (requests.length !== 4) problems.push(`${requests.length} model requests, not 4`);
    if (!existsSync(TRACES)) problems.push('no traces.jsonl');
    if (problems.length) throw new Error(problems.join('; '));
    console.log(`recorded ${result.steps.length} steps, ${requests.length} model requests: ` +
                `${result.text} -> ${TRACES}`);
  } finally {
    server.kill();
  }
}

await main();
