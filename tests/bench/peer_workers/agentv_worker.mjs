// agentv's tool_trajectory grader, driven for tests/bench/bench_peers.py.
//
//   node agentv_worker.mjs DIR      (DIR: where install_peers.sh put agentv)
//
// Reads one JSON request per line on stdin and answers one line on stdout, prefixed "@@peer ":
//   {"op": "load", "calls": [...], "configs": {...}}  -> {"ok": true, "version": ...}
//   {"op": "grade", "family": "trajectory in_order"}  -> {"ms": ..., "score": ..., "passed": ...}
// Only the grader's evaluate() call is timed (process.hrtime.bigint); building the grader and
// the provider's output messages is done at load.
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

const dir = join(process.argv[2], "node_modules", "agentv");
const version = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;

// The grader class is exported by one of the CLI's bundled chunks; find it by its definition.
async function loadGrader() {
  const dist = join(dir, "dist");
  for (const file of readdirSync(dist)) {
    if (!file.endsWith(".js")) continue;
    const text = readFileSync(join(dist, file), "utf8");
    if (text.includes("var ToolTrajectoryGrader = class")) {
      const mod = await import(pathToFileURL(join(dist, file)).href);
      if (mod.ToolTrajectoryGrader) return mod.ToolTrajectoryGrader;
    }
  }
  throw new Error(`no ToolTrajectoryGrader export under ${dist}`);
}

const Grader = await loadGrader();
const reply = (obj) => process.stdout.write(`@@peer ${JSON.stringify(obj)}\n`);

let prepared = {};

function prepare(calls, configs) {
  // The provider's trace, as agentv reads it: output_messages[].tool_calls, one turn per call.
  const output = calls.map((c) => ({
    role: "assistant",
    toolCalls: [{ tool: c.name, input: c.args, output: c.result, durationMs: c.duration_ms }],
  }));
  const out = {};
  for (const [family, cfg] of Object.entries(configs)) {
    if (!family.startsWith("trajectory ")) continue;
    const config = { name: family, type: "tool-trajectory", mode: cfg.mode };
    if (cfg.minimums) config.minimums = cfg.minimums;
    if (cfg.expected) {
      config.expected = cfg.expected.map((e) => ({
        tool: e.tool, args: e.args, maxDurationMs: e.max_duration_ms,
      }));
    }
    out[family] = { grader: new Grader({ config }), context: { output } };
  }
  return out;
}

function grade(family) {
  const entry = prepared[family];
  if (!entry) return { error: `agentv has no grader for ${family}` };
  const t0 = process.hrtime.bigint();
  const result = entry.grader.evaluate(entry.context);
  const t1 = process.hrtime.bigint();
  return { ms: Number(t1 - t0) / 1e6, score: result.score, passed: result.verdict === "pass" };
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  try {
    if (req.op === "load") {
      prepared = prepare(req.calls, req.configs);
      reply({ ok: true, version });
    } else if (req.op === "grade") {
      reply(grade(req.family));
    } else {
      reply({ error: `unknown op ${req.op}` });
    }
  } catch (err) {
    reply({ error: String(err && err.stack ? err.stack : err) });
  }
}
