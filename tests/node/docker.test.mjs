// The Node helper against the real Docker daemon, through programs that use it as a user
// would: `guard()`, labels, claims, children, `close()`, `process.exit()`, SIGKILL, and
// testcontainers-node through `guard({ dockerProxy: true })` with no sandguard code in the
// client.

import assert from "node:assert/strict";
import { test } from "node:test";
import { bystander, docker, eventually, exists, guardedEnv, IMAGE, removeQuietly, run, scratch, start } from "./support.mjs";

test("a clean close() resolves to its outcome: the labelled and the claimed container are gone, a bystander stays, the environment is put back", async (t) => {
  const kept = bystander(t);
  const out = await run(
    "clean-close.cjs",
    `
const { guard, SandguardError } = require("sandguard");
const { execFileSync } = require("node:child_process");
const docker = (...a) => execFileSync("docker", a, { encoding: "utf8" }).trim();
(async () => {
  const before = process.env.SANDGUARD_SESSION;
  const g = await guard();
  const labelled = docker("run", "-d", ...g.labelArgs(), ${JSON.stringify(IMAGE)}, "sleep", "600");
  const plain = docker("run", "-d", ${JSON.stringify(IMAGE)}, "sleep", "600");
  await g.claim("docker", plain);
  const during = process.env.SANDGUARD_SESSION;
  const outcome = await g.close();
  let late = null;
  try { await g.claim("docker", plain); } catch (e) { late = e instanceof SandguardError ? e.message : String(e); }
  console.log(JSON.stringify({ session: g.session, labels: g.labels, before, during, after: process.env.SANDGUARD_SESSION ?? null, labelled, plain, outcome, again: await g.close(), late }));
})();
`,
    guardedEnv(scratch()),
  );
  assert.equal(out.code, 0, out.stderr);
  const said = JSON.parse(out.stdout.trim().split("\n").pop());
  t.after(() => removeQuietly(said.labelled, said.plain));
  assert.equal(said.outcome.state, "clean", out.stdout);
  assert.equal(said.outcome.clean, true);
  assert.deepEqual(said.again, said.outcome, "a second close() resolves to the same outcome");
  assert.equal(exists(said.labelled), false, "the labelled container is gone when close() resolves");
  assert.equal(exists(said.plain), false, "the claimed container is gone when close() resolves");
  assert.equal(exists(kept), true, "the bystander is kept");
  assert.equal(said.before, undefined);
  assert.equal(said.during, said.session);
  assert.equal(said.after, null, "close() puts the environment back");
  assert.equal(said.labels["sandguard.session"], said.session);
  assert.match(said.labels["sandguard.owner"], /^[0-9a-f]{16}-[0-9a-f]{16}-\d+-\d+(-\d+)?$/);
  assert.match(said.late, /closed/);
});

test("node SIGKILLed: what testcontainers-node made through the Docker proxy and what was claimed are gone, a bystander stays", async (t) => {
  const kept = bystander(t);
  const program = start(
    "sigkill.mjs",
    `
import { guard } from "sandguard";
import { execFileSync } from "node:child_process";
const g = await guard({ dockerProxy: true });
// From here on the program knows nothing of sandguard: testcontainers reads DOCKER_HOST.
const { GenericContainer } = await import("testcontainers");
const container = await new GenericContainer(${JSON.stringify(IMAGE)}).withCommand(["sleep", "600"]).start();
const plain = execFileSync("docker", ["--host", "unix:///var/run/docker.sock", "run", "-d", ${JSON.stringify(IMAGE)}, "sleep", "600"], { encoding: "utf8" }).trim();
await g.claim("docker", plain);
console.log(JSON.stringify({ made: [container.getId(), plain], host: process.env.DOCKER_HOST, ryuk: process.env.TESTCONTAINERS_RYUK_DISABLED }));
setInterval(() => {}, 1000);
`,
    guardedEnv(scratch()),
  );
  const { made, host, ryuk } = await program.said("made", 90_000);
  t.after(() => removeQuietly(...made));
  assert.match(host, /^unix:\/\/.*docker\.sock$/, "guard({ dockerProxy: true }) exported the proxy as DOCKER_HOST");
  assert.equal(ryuk, "true", "and TESTCONTAINERS_RYUK_DISABLED, so testcontainers started no Ryuk");
  assert.deepEqual(made.map(exists), [true, true], "both containers run while node lives");
  assert.equal(docker("inspect", "--format", "{{index .Config.Labels \"sandguard.session\"}}", made[0]).length, 32, "the proxy stamped the session's label");
  program.kill("SIGKILL");
  const { signal } = await program.exited;
  assert.equal(signal, "SIGKILL");
  await eventually("both containers are gone after node's SIGKILL", () => !made.some(exists));
  assert.equal(exists(kept), true, "the bystander is kept");
});

test("process.exit() without close() still says bye: what was labelled is gone by the time node has exited", async (t) => {
  const out = await run(
    "exit.cjs",
    `
const { guard } = require("sandguard");
const { execFileSync } = require("node:child_process");
guard().then((g) => {
  const id = execFileSync("docker", ["run", "-d", ...g.labelArgs(), ${JSON.stringify(IMAGE)}, "sleep", "600"], { encoding: "utf8" }).trim();
  process.on("exit", () => console.log(JSON.stringify({ id, outcome: g.outcome })));
  process.exit(7);
});
`,
    guardedEnv(scratch()),
  );
  assert.equal(out.code, 7, out.stderr);
  const said = JSON.parse(out.stdout.trim().split("\n").pop());
  t.after(() => removeQuietly(said.id));
  assert.equal(said.outcome?.state, "clean", out.stdout);
  assert.equal(exists(said.id), false, "gone before node's exit status was known");
});

test("a child started with g.spawnOptions() claims on the same session, and its claim is reclaimed", async (t) => {
  const out = await run(
    "child.mjs",
    `
import { guard, findBinary } from "sandguard";
import { execFileSync, spawnSync } from "node:child_process";
const g = await guard();
const id = execFileSync("docker", ["run", "-d", ${JSON.stringify(IMAGE)}, "sleep", "600"], { encoding: "utf8" }).trim();
// A grandchild node that claims through the package's module-level claim().
const child = spawnSync(process.execPath, ["-e", "require('sandguard').claim('docker', process.argv[1]).then(() => console.log('claimed'), (e) => { console.error(e.message); process.exit(3); })", id], g.spawnOptions({ stdio: ["ignore", "pipe", "pipe"], encoding: "utf8" }));
// Without the pipe the child is told why.
const bare = spawnSync(findBinary(), ["claim", "docker", id], { encoding: "utf8", env: g.childEnv() });
const outcome = await g.close();
console.log(JSON.stringify({ id, status: child.status, said: child.stdout + child.stderr, bare: bare.status, bareSaid: bare.stderr, outcome }));
`,
    guardedEnv(scratch()),
  );
  assert.equal(out.code, 0, out.stderr);
  const said = JSON.parse(out.stdout.trim().split("\n").pop());
  t.after(() => removeQuietly(said.id));
  assert.equal(said.status, 0, said.said);
  assert.match(said.said, /claimed/);
  assert.notEqual(said.bare, 0, "a child without the pipe cannot claim");
  assert.match(said.bareSaid, /SANDGUARD_FD is not set/, "and is told why: the guard exports no descriptor number its children lack");
  assert.equal(said.outcome.state, "clean");
  assert.equal(exists(said.id), false, "the child's claim was reclaimed at close()");
});

test("a claim of a container that carries another live session's label is refused, and the container stays", async (t) => {
  const other = start(
    "other.cjs",
    `
const { guard } = require("sandguard");
const { execFileSync } = require("node:child_process");
guard().then((g) => {
  const id = execFileSync("docker", ["run", "-d", ...g.labelArgs(), ${JSON.stringify(IMAGE)}, "sleep", "600"], { encoding: "utf8" }).trim();
  console.log(JSON.stringify({ id }));
  setInterval(() => {}, 1000);
});
`,
    guardedEnv(scratch()),
  );
  const { id } = await other.said("id");
  t.after(async () => {
    other.kill("SIGKILL");
    await other.exited;
    removeQuietly(id);
  });
  const out = await run(
    "thief.mjs",
    `
import { guard } from "sandguard";
const g = await guard();
let refused = null;
try { await g.claim("docker", process.argv[2]); } catch (e) { refused = { name: e.name, message: e.message }; }
console.log(JSON.stringify({ refused, outcome: await g.close() }));
`,
    guardedEnv(scratch()),
    [id],
  );
  assert.equal(out.code, 0, out.stderr);
  const said = JSON.parse(out.stdout.trim().split("\n").pop());
  assert.equal(said.refused?.name, "SandguardError", out.stdout);
  assert.match(said.refused.message, /refused docker [0-9a-f]{64}: .*carries session [0-9a-f]{32}'s label and that session may still live/);
  assert.equal(said.outcome.state, "clean");
  assert.equal(exists(id), true, "the other session's container is not touched");
});

// Issue 38: on macOS there is no /proc, so the helper asks the binary for the owner label
// (`sandguard identity --pid`) and looks for `@sandguard/darwin-ARCH`. With process.platform
// saying darwin, that path runs here whole, against the Linux binary: the label it gets is
// the one read from /proc, and the sidecar reclaims node's container after a SIGKILL.
test("process.platform darwin: the platform package is @sandguard/darwin-ARCH, the owner label comes from the binary, and node's SIGKILL is reclaimed", async (t) => {
  const program = start(
    "darwin.cjs",
    `
const sandguard = require("sandguard");
const { execFileSync } = require("node:child_process");
const binary = sandguard.findBinary();
Object.defineProperty(process, "platform", { value: "win32" });
sandguard.guard({ binary }).then(
  () => console.log(JSON.stringify({ win32: "started" })),
  (e) => {
    console.log(JSON.stringify({ win32: e.message }));
    Object.defineProperty(process, "platform", { value: "darwin" });
    const platform = sandguard.platformPackage();
    return sandguard.guard({ binary }).then((g) => {
      const id = execFileSync("docker", ["run", "-d", ...g.labelArgs(), ${JSON.stringify(IMAGE)}, "sleep", "600"], { encoding: "utf8" }).trim();
      const asked = execFileSync(binary, ["identity", "--pid", String(process.pid)], { encoding: "utf8" }).trim();
      console.log(JSON.stringify({ id, platform, owner: g.labels["sandguard.owner"], asked }));
      setInterval(() => {}, 1000);
    });
  },
);
`,
    guardedEnv(scratch()),
  );
  const { win32 } = await program.said("win32", 30_000);
  assert.match(win32, /sandguard runs on Linux and macOS only \(this is win32\)/);
  const { id, platform, owner, asked } = await program.said("id", 30_000);
  t.after(() => removeQuietly(id));
  assert.equal(platform, `@sandguard/darwin-${process.arch}`);
  assert.equal(owner, asked, "the label the sidecar guards is the one the binary gives");
  assert.match(owner, /^[0-9a-f]{16}-[0-9a-f]{16}-\d+-\d+-\d+$/);
  assert.equal(exists(id), true);
  program.kill("SIGKILL");
  await program.exited;
  await eventually("the container is gone after node's SIGKILL", () => !exists(id));
});
