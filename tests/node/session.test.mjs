// What a guard says and keeps: the sidecar's lines read as the Rust side writes them, and the
// environment of a program that opens several guards and closes them in any order.

import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { join } from "node:path";
import { test } from "node:test";
import { guardedEnv, project, run, scratch } from "./support.mjs";

const sandguard = () => createRequire(join(project(), "x.cjs"))("sandguard");

test("the sidecar's lines are read as src/protocol writes them", () => {
  const { parseOutcome, parseReady, describe } = sandguard();
  // The lines of src/protocol/outcome.rs's round-trip test.
  assert.deepEqual(parseOutcome("ended clean\n"), { state: "clean", clean: true, left: [], count: 0, detail: "" });
  const left = parseOutcome("ended left 2: docker/3f2a failed: conflict; e2b/* not listed: connection refused");
  assert.deepEqual(left.left, [
    { provider: "docker", id: "3f2a", reason: "failed: conflict" },
    { provider: "e2b", id: "*", reason: "not listed: connection refused" },
  ]);
  assert.equal(left.count, 2);
  assert.equal(describe(left), "left 2: docker/3f2a failed: conflict; e2b/* not listed: connection refused");
  assert.equal(parseOutcome("ready abc"), null);
  assert.equal(parseOutcome("ended left x: a/b c"), null);
  // The ready line (src/session/spawn.rs): variables, the older bare DOCKER_HOST, refusals.
  const s = "0123456789abcdef0123456789abcdef";
  assert.deepEqual(parseReady(`ready ${s} DOCKER_HOST=unix:///x/docker.sock E2B_API_URL=http://127.0.0.1:9`, s), {
    DOCKER_HOST: "unix:///x/docker.sock",
    E2B_API_URL: "http://127.0.0.1:9",
  });
  assert.deepEqual(parseReady(`ready ${s} unix:///x/docker.sock`, s), { DOCKER_HOST: "unix:///x/docker.sock" });
  assert.throws(() => parseReady("error cannot bind", s), /the sidecar failed to start: cannot bind/);
  assert.throws(() => parseReady(`ready ${"f".repeat(32)}`, s), /answered for session/);
  assert.throws(() => parseReady(`ready ${s} 1BAD=x`, s), /unexpected word/);
  assert.throws(() => parseReady("", s), /exited before it was ready/);
});

test("guards closed out of order leave no closed session in process.env, and a wrapper's SANDGUARD_FD comes back", async () => {
  const out = await run(
    "two-guards.cjs",
    `
const { guard } = require("sandguard");
const seen = () => ({ session: process.env.SANDGUARD_SESSION ?? null, fd: process.env.SANDGUARD_FD ?? null });
(async () => {
  const steps = [seen()];
  const a = await guard({ renewEvery: null });
  steps.push(seen());
  const b = await guard({ renewEvery: null });
  steps.push(seen());
  await a.close();
  steps.push(seen());
  await b.close();
  steps.push(seen());
  console.log(JSON.stringify({ a: a.session, b: b.session, steps }));
})();
`,
    // A SANDGUARD_FD as `sandguard -- node` would leave it (here naming nothing).
    guardedEnv(scratch(), { SANDGUARD_FD: "99", SANDGUARD_SESSION: "wrapper" }),
  );
  assert.equal(out.code, 0, out.stderr);
  const { a, b, steps } = JSON.parse(out.stdout);
  assert.deepEqual(steps, [
    { session: "wrapper", fd: "99" },
    { session: a, fd: null },
    { session: b, fd: null },
    { session: b, fd: null },
    { session: "wrapper", fd: "99" },
  ]);
});
