// A host written in another language: a scripted coding-agent turn, recorded as an agentturn
// trace that `agentturn check` verifies.
//
//   node examples/node_host/host.mjs OUT.jsonl          an honest host
//   node examples/node_host/host.mjs OUT.jsonl --bug    the usual bug: it runs the tool call of a
//                                                        response cut at the output limit (TL-9)
//
// The host has its own small turn loop (what a TypeScript runtime has) and writes every event it
// fed and every command it carried out, in the trace format (docs/trace-format.schema.json):
// a header, one step a line, an end record with the SHA-256 of the lines before it. agentturn
// replays the events through its reducer and compares the commands: the honest host's agree;
// the buggy one's differ at the step where it ran the tool, and the TL-9 rule names it.
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";

const [out, flag] = process.argv.slice(2);
if (!out) {
  console.error("usage: node host.mjs OUT.jsonl [--bug]");
  process.exit(2);
}
const buggy = flag === "--bug";

// The engine's raw finish reasons, and whether each ends a response normally.
const FINISH = { end_turn: "stop", stop: "stop", tool_use: "tool_calls", tool_calls: "tool_calls",
                 max_tokens: "length", length: "length" };
const normal = (kind) => kind === "stop" || kind === "tool_calls";

const call = { call_id: "call_0", name: "list_dir", arguments: '{"path": "."}' };
const model = [
  { text: "", finish_reason: buggy ? "max_tokens" : "tool_use", tool_calls: [call] },
  { text: "One file: a.txt.", finish_reason: "end_turn", tool_calls: [] },
];

const steps = [];
const queue = [{ type: "PromptSubmitted", turn_id: "t1", message_id: "m1", text: "List the files" }];
let writes = 0, requests = 0, response = null, pending = null;

function persist(records, then) {
  writes += 1;
  pending = then;
  const key = `t1/p${writes}`;
  queue.push({ type: "Persisted", key });
  return { type: "Persist", key, records };
}

function request() {
  requests += 1;
  const request_id = `t1/r${requests}`;
  const answer = model[requests - 1];
  queue.push({ type: "StreamOpened", request_id });
  queue.push({ type: "StreamCompleted", request_id, ...answer });
  return { type: "RequestModelStream", request_id };
}

function end(kind, finish, message) {
  return { type: "EndTurn", turn_id: "t1", origin: "prompt",
           outcome: { kind, finish_reason: finish, message, resumable: false } };
}

function step(event) {
  switch (event.type) {
    case "PromptSubmitted":
      return [persist([{ message_id: event.message_id, text: event.text }], "request")];
    case "StreamOpened":
      return [];
    case "StreamCompleted": {
      const finish = { kind: FINISH[event.finish_reason] ?? "other", raw: event.finish_reason };
      response = { finish, calls: event.tool_calls };
      // The record marks a response the output limit cut (its calls never run, and are not
      // sent to the engine again): here the finish reason says so.
      const cut_off = finish.kind === "length" ? "finish_reason" : null;
      return [persist([{ request_id: event.request_id, text: event.text,
                         tool_calls: event.tool_calls, finish_reason: finish, cut_off }],
                      "response")];
    }
    case "Persisted": {
      const then = pending;
      if (then === "request") return [request()];
      if (then === "response") {
        if (response.calls.length && (normal(response.finish.kind) || buggy)) {
          queue.push({ type: "ToolFinished", call_id: call.call_id, output: "a.txt" });
          return [{ type: "ExecuteTool", call }];
        }
        if (response.calls.length) {
          return [persist([{ call_id: call.call_id, name: call.name, status: "skipped",
                             reason: "Not run: the response was cut at the engine's output " +
                                     "limit, so this call may be incomplete." }], "cut")];
        }
        return [end("finished", response.finish, "The agent finished.")];
      }
      if (then === "cut") {
        return [end("output_limit", response.finish, "The response was cut at the engine's " +
                    `output limit (finish reason '${response.finish.raw}'); its 1 tool call(s) ` +
                    "were not run.")];
      }
      return [];
    }
    case "ToolFinished":
      return [persist([{ call_id: event.call_id, name: call.name, status: "executed",
                         output: event.output }], "request")];
    default:
      throw new Error(`unexpected event ${event.type}`);
  }
}

while (queue.length) {
  const event = queue.shift();
  steps.push({ step: steps.length + 1, event, commands: step(event) });
}

const lines = [
  JSON.stringify({ format: "agentturn-trace", format_version: 1, library_version: "node-host 1",
                   part: "turn", chat_id: "chat-js", config: { auto_title: false } }),
  ...steps.map((s) => JSON.stringify(s)),
];
const digest = createHash("sha256");
for (const line of lines) digest.update(line + "\n", "utf8");
lines.push(JSON.stringify({ end: true, steps: steps.length, digest: digest.digest("hex") }));
writeFileSync(out, lines.map((line) => line + "\n").join(""), "utf8");
