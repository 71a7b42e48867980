// The E2B JS SDK from npm, unchanged, under `guard({ cloudProxy: true })`, against the Rust
// suite's E2B emulator (examples/emulate.rs, the same model of the service the sidecar's own
// tests use): what it creates carries the session's labels and is reclaimed at `close()` and
// after node's SIGKILL; a sandbox of nobody's is kept.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { guardedEnv, run, scratch, start } from "./support.mjs";

const KEY = "e2b_" + "7".repeat(32);
let emulator;
let url;

before(async () => {
  const path = process.env.SANDGUARD_EMULATE;
  assert.ok(path, "SANDGUARD_EMULATE is not set: run the Node tests through tests/run.sh");
  // stdin a pipe held open: its EOF stops the emulator.
  emulator = spawn(path, ["e2b", KEY], { stdio: ["pipe", "pipe", "inherit"] });
  url = await new Promise((resolve, reject) => {
    let out = "";
    emulator.stdout.setEncoding("utf8").on("data", (d) => {
      out += d;
      const m = /^url=(\S+)\n/.exec(out);
      if (m) resolve(m[1]);
    });
    emulator.on("exit", (code) => reject(new Error(`the emulator exited (${code}) before its url`)));
  });
});

after(() => emulator?.kill("SIGTERM"));

/** The emulator's answer about one sandbox: its metadata, or null once it is gone (404). */
async function sandbox(id) {
  const res = await fetch(`${url}/sandboxes/${id}`, { headers: { "X-API-Key": KEY } });
  if (res.status === 404) return null;
  const text = await res.text();
  assert.equal(res.status, 200, text);
  return JSON.parse(text).metadata ?? {};
}

/** A sandbox created at the emulator directly, by nobody sandguard knows. */
async function bystander() {
  const res = await fetch(`${url}/v2/sandboxes`, {
    method: "POST",
    headers: { "X-API-Key": KEY, "Content-Type": "application/json" },
    body: JSON.stringify({ templateID: "base", metadata: { owner: "someone else" } }),
  });
  assert.equal(res.status, 201);
  return (await res.json()).sandboxID;
}

/** A config with only E2B (from the environment's key and URL) and no settle pass. */
function setup() {
  const dir = scratch();
  const config = join(dir, "sandguard.toml");
  writeFileSync(config, '[providers.docker]\nenabled = false\n\n[reclaim]\nsettle = "0"\n');
  return { config, env: guardedEnv(dir, { E2B_API_KEY: KEY, E2B_API_URL: url }) };
}

// argv: CONFIG [close]. Everything after guard() is plain SDK code.
const PROGRAM = `
import { guard } from "sandguard";
const g = await guard({ cloudProxy: true, config: process.argv[2], renewEvery: null });
const during = process.env.E2B_API_URL;
const { Sandbox } = await import("e2b");
const sbx = await Sandbox.create({ metadata: { mine: "1" } });
console.log(JSON.stringify({ session: g.session, during, id: sbx.sandboxId }));
if (process.argv[3] === "close") {
  const outcome = await g.close();
  console.log(JSON.stringify({ outcome, after: process.env.E2B_API_URL }));
} else {
  setInterval(() => {}, 1000);
}
`;

test("the E2B SDK through guard({ cloudProxy: true }): its sandbox is stamped, and node's SIGKILL reclaims it, not a bystander", async (t) => {
  const kept = await bystander();
  const { config, env } = setup();
  const program = start("e2b-sigkill.mjs", PROGRAM, env, [config]);
  t.after(() => program.kill("SIGKILL"));
  const said = await program.said("id");
  assert.match(said.during, /^http:\/\/127\.0\.0\.1:\d+$/);
  assert.notEqual(said.during, url, "the SDK was pointed at the sidecar's proxy");
  const metadata = await sandbox(said.id);
  assert.equal(metadata?.["sandguard.session"], said.session, "the proxy stamped the session's label");
  assert.equal(metadata?.mine, "1", "the program's own metadata is kept");
  program.kill("SIGKILL");
  assert.equal((await program.exited).signal, "SIGKILL");
  let gone = false;
  for (const deadline = Date.now() + 15_000; !gone && Date.now() < deadline; ) {
    gone = (await sandbox(said.id)) === null;
    if (!gone) await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(gone, true, "the sandbox is deleted after node's SIGKILL");
  assert.deepEqual(await sandbox(kept), { owner: "someone else" }, "the bystander is kept");
});

test("the E2B SDK through guard({ cloudProxy: true }): close() resolves clean once the sandbox is deleted, and E2B_API_URL is put back", async () => {
  const { config, env } = setup();
  const out = await run("e2b-close.mjs", PROGRAM, env, [config, "close"]);
  assert.equal(out.code, 0, out.stderr);
  const [made, ended] = out.stdout.trim().split("\n").map((l) => JSON.parse(l));
  assert.equal(ended.outcome.state, "clean", out.stdout);
  assert.equal(ended.after, url, "close() put E2B_API_URL back");
  assert.equal(await sandbox(made.id), null, "deleted by the time close() resolved");
});

test("close() when E2B cannot be reached: the outcome names what was left and why, strict rejects with it, and it is said on stderr", async () => {
  // An emulator of its own, stopped before the end: the sandbox cannot be deleted.
  const own = spawn(process.env.SANDGUARD_EMULATE, ["e2b", KEY], { stdio: ["pipe", "pipe", "inherit"] });
  const ownUrl = await new Promise((resolve) => {
    let out = "";
    own.stdout.setEncoding("utf8").on("data", (d) => {
      out += d;
      const m = /^url=(\S+)\n/.exec(out);
      if (m) resolve(m[1]);
    });
  });
  const dir = scratch();
  const config = join(dir, "sandguard.toml");
  writeFileSync(config, '[providers.docker]\nenabled = false\n\n[reclaim]\nsettle = "0"\ndeadline = "2s"\nretry_initial = "50ms"\nretry_max = "200ms"\n');
  const env = guardedEnv(dir, { E2B_API_KEY: KEY, E2B_API_URL: ownUrl });
  const program = start(
    "e2b-left.mjs",
    `
import { guard, ReclaimIncomplete } from "sandguard";
import { existsSync } from "node:fs";
const g = await guard({ cloudProxy: true, config: process.argv[2], renewEvery: null, strict: true });
const { Sandbox } = await import("e2b");
const sbx = await Sandbox.create({});
console.log(JSON.stringify({ id: sbx.sandboxId }));
while (!existsSync(process.argv[3])) await new Promise((r) => setTimeout(r, 20));
try {
  await g.close();
  console.log(JSON.stringify({ rejected: null }));
} catch (e) {
  console.log(JSON.stringify({ rejected: e.name, isIt: e instanceof ReclaimIncomplete, outcome: e.outcome, kept: g.outcome }));
}
`,
    env,
    [config, join(dir, "go")],
  );
  const { id } = await program.said("id");
  own.kill("SIGTERM");
  await new Promise((r) => own.on("exit", r));
  writeFileSync(join(dir, "go"), "");
  const said = await program.said("rejected", 30_000);
  await program.exited;
  assert.equal(said.rejected, "ReclaimIncomplete", program.stdoutText);
  assert.equal(said.isIt, true);
  assert.equal(said.outcome.state, "left");
  assert.equal(said.outcome.clean, false);
  assert.ok(said.outcome.count >= 1);
  assert.ok(said.outcome.left.some((l) => l.provider === "e2b" && (l.id === id || l.id === "*")), JSON.stringify(said.outcome));
  assert.deepEqual(said.kept, said.outcome, "the outcome is kept on the guard too");
  assert.match(program.stderrText, /the reclaim after bye left \d+: e2b\//);
});

// argv: CONFIG. The second create is over guard({ maxSandboxes: 1 }).
const LIMITED = `
import { guard } from "sandguard";
const g = await guard({ cloudProxy: true, config: process.argv[2], renewEvery: null, maxSandboxes: 1 });
const { Sandbox } = await import("e2b");
const first = await Sandbox.create();
let refused = null;
try {
  await Sandbox.create();
} catch (e) {
  refused = { name: e.name, message: String(e.message) };
}
const outcome = await g.close();
console.log(JSON.stringify({ id: first.sandboxId, refused, state: outcome.state }));
`;

test("guard({ maxSandboxes: 1 }): the E2B SDK's second create rejects with the proxy's message, and close() deletes the one it made", async () => {
  const { config, env } = setup();
  const out = await run("e2b-limited.mjs", LIMITED, env, [config]);
  assert.equal(out.code, 0, out.stderr);
  const said = JSON.parse(out.stdout.trim());
  assert.ok(said.refused, out.stdout);
  assert.match(said.refused.message, /sandguard: refused a sandbox create on e2b: limit `sandboxes` reached/);
  assert.equal(said.state, "clean", out.stdout);
  assert.equal(await sandbox(said.id), null, "close() deleted the one it made");
});
