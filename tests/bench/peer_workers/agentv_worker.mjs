// agentv's tool_trajectory grader, driven for tests/bench/bench_peers.py.
//
//   node agentv_worker.mjs DIR      (DIR: where install_peers.sh put agentv)
//
// Reads one JSON request per line on stdin and answers one line on stdout, prefixed "@@peer ":
//   {"op": "load", "calls": [...], "configs": {...}}  -> {"ok": true, "version": ...}
//   {"op": "grade", "family": "trajectory in_order"}  -> {"ms": ..., "wall_ms": ..., "cpu_ms": ...,
//                                                         "cpu_clock": "process", "score": ...,
//                                                         "passed": ...}
// The graders are built at load (what a config gives). Before every grading call, untimed, the
// provider's output messages are built afresh from the run's calls (parsed again from their JSON
// text, so that no object of an earlier grade is reused), as the Python sides do
// (peer_workers/_protocol.py); with "warm": true an untimed evaluate() of another fresh trace
// comes first. V8's collector is left alone: a forced full collection before each call
// (global.gc() under --expose-gc) made evaluate() 5-10x slower at 10-100 calls (0.007 -> 0.08 ms
// for any_order at 10), the compiled code's warm state lost, a cost no real grade pays; V8
// collects its young generation in steps small next to a grade. Only evaluate() is
// timed, by two clocks: the wall clock (process.hrtime.bigint, ns) and CPU time. Node 20 has no
// per-thread CPU clock (process.threadCpuUsage() came in later versions), so the CPU time is
// process.cpuUsage() (getrusage: user + system of all the process's threads, in µs): besides the
// grading thread it counts V8's helper threads (parallel scavenges, concurrent marking,
// background compiling), which do work for the grade; the worker has nothing else running.
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
let callsText = "[]";

// The provider's trace, as agentv reads it: output_messages[].tool_calls, one turn per call.
function traceOf(calls) {
  return calls.map((c) => ({
    role: "assistant",
    toolCalls: [{ tool: c.name, input: c.args, output: c.result, durationMs: c.duration_ms }],
  }));
}

function load(calls, configs) {
  callsText = JSON.stringify(calls);
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
    out[family] = { grader: new Grader({ config }) };
  }
  return out;
}

function grade(family, warm) {
  const entry = prepared[family];
  if (!entry) return { error: `agentv has no grader for ${family}` };
  if (warm) entry.grader.evaluate({ output: traceOf(JSON.parse(callsText)) });
  const context = { output: traceOf(JSON.parse(callsText)) }; // the last one is garbage now
  const w0 = process.hrtime.bigint();
  const c0 = process.cpuUsage();
  const result = entry.grader.evaluate(context);
  const c1 = process.cpuUsage(c0);
  const w1 = process.hrtime.bigint();
  const wallMs = Number(w1 - w0) / 1e6;
  return {
    ms: wallMs, wall_ms: wallMs, cpu_ms: (c1.user + c1.system) / 1000, cpu_clock: "process",
    score: result.score, passed: result.verdict === "pass",
  };
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  try {
    if (req.op === "load") {
      prepared = load(req.calls, req.configs);
      reply({ ok: true, version });
    } else if (req.op === "grade") {
      reply(grade(req.family, Boolean(req.warm)));
    } else {
      reply({ error: `unknown op ${req.op}` });
    }
  } catch (err) {
    reply({ error: String(err && err.stack ? err.stack : err) });
  }
}
