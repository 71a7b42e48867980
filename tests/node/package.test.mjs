// The npm package as npm installed it from its tarball: one implementation behind `require`
// and `import`, types a TypeScript program compiles against, and the binary found as
// documented (SANDGUARD_BIN, the platform package, PATH), or an error naming all three.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { guardedEnv, project, run, scratch } from "./support.mjs";

test("require and import give the same implementation, and the binary is the platform package's", async () => {
  writeFileSync(join(project(), "face.cjs"), "module.exports = require('sandguard');\n");
  const out = await run(
    "faces.mjs",
    `
import * as esm from "sandguard";
import { createRequire } from "node:module";
const cjs = createRequire(import.meta.url)("./face.cjs");
const names = Object.keys(cjs).sort();
console.log(JSON.stringify({
  same: names.every((n) => esm[n] === cjs[n]) && esm.default === cjs,
  missing: names.filter((n) => !(n in esm)),
  binary: esm.findBinary(),
  platform: esm.platformPackage(),
}));
`,
    guardedEnv(scratch()),
  );
  assert.equal(out.code, 0, out.stderr);
  const said = JSON.parse(out.stdout);
  assert.deepEqual(said.missing, [], "the ES module face names every export");
  assert.equal(said.same, true, "one implementation behind both");
  assert.equal(said.platform, `@sandguard/linux-${process.arch}-gnu`);
  assert.equal(said.binary, join(project(), "node_modules", "@sandguard", `linux-${process.arch}-gnu`, "bin", "sandguard"));
});

// The types name Node's own (`NodeJS.ProcessEnv`, `SpawnOptions`), as every Node library's do:
// the program has `@types/node`, here the build's.
test("a TypeScript program type-checks against the package's types", () => {
  const npmOut = process.env.SANDGUARD_NPM_OUT;
  assert.ok(npmOut, "SANDGUARD_NPM_OUT is not set: run the Node tests through tests/run.sh");
  const dir = scratch();
  writeFileSync(
    join(dir, "program.ts"),
    `
import { guard, type Outcome, SandguardError } from "sandguard";
async function main(): Promise<Outcome> {
  const g = await guard({ dockerProxy: "auto", cloudProxy: true, grace: "10m", wait: 5000 });
  const labels: Record<string, string> = g.labels;
  const env: Record<string, string> = g.env;
  await g.claim("docker", "abc");
  const opts = g.spawnOptions({ stdio: "inherit" as const });
  void labels; void env; void opts; void SandguardError;
  {
    await using h = await guard();
    void h.session;
  }
  return g.close();
}
void main;
// @ts-expect-error: dockerProxy is a boolean or "auto"
void guard({ dockerProxy: "always" });
`,
  );
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        strict: true,
        noEmit: true,
        module: "node16",
        moduleResolution: "node16",
        target: "ES2022",
        lib: ["ES2022", "esnext.disposable"],
        typeRoots: [join(npmOut, "tools", "node_modules", "@types")],
        types: ["node"],
      },
      files: ["program.ts"],
    }),
  );
  symlinkSync(join(project(), "node_modules"), join(dir, "node_modules"));
  const tsc = join(npmOut, "tools", "node_modules", ".bin", "tsc");
  const r = spawnSync(tsc, ["-p", dir], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test("the binary: SANDGUARD_BIN first, then the platform package, then PATH, else an error naming all three", async (t) => {
  // A project holding the package without its platform package (as `npm install
  // --omit=optional` leaves it), outside the test project so nothing there is found.
  const alone = mkdtempSync(join(tmpdir(), "sandguard-alone-"));
  t.after(() => rmSync(alone, { recursive: true, force: true }));
  mkdirSync(join(alone, "node_modules"));
  cpSync(join(project(), "node_modules", "sandguard"), join(alone, "node_modules", "sandguard"), { recursive: true });
  const bin = join(alone, "bin");
  mkdirSync(bin);
  const real = execFileSync(process.execPath, ["-p", "require('sandguard').findBinary()"], { cwd: project(), encoding: "utf8" }).trim();
  symlinkSync(real, join(bin, "sandguard"));
  const find = (env) =>
    spawnSync(process.execPath, ["-e", "try { console.log(require('sandguard').findBinary()) } catch (e) { console.log(e.name + ': ' + e.message) }"], {
      cwd: alone,
      encoding: "utf8",
      env: { ...guardedEnv(alone), ...env },
    }).stdout.trim();
  const path = guardedEnv(alone).PATH;
  assert.equal(find({ PATH: `${bin}:${path}` }), join(bin, "sandguard"), "PATH when there is no platform package");
  assert.equal(find({ PATH: `${bin}:${path}`, SANDGUARD_BIN: "/opt/mine/sandguard" }), "/opt/mine/sandguard", "SANDGUARD_BIN first");
  const none = find({ PATH: path });
  assert.match(none, /^SandguardError: cannot find the sandguard binary/);
  assert.match(none, /@sandguard\/linux-\w+-gnu is not installed/);
  assert.match(none, /SANDGUARD_BIN is not set/);
  assert.match(none, /PATH/);
  // In the test project the platform package wins over PATH.
  const withPackage = spawnSync(process.execPath, ["-p", "require('sandguard').findBinary()"], {
    cwd: project(),
    encoding: "utf8",
    env: { ...guardedEnv(alone), PATH: `${bin}:${path}` },
  }).stdout.trim();
  assert.equal(withPackage, real);
});

test("guard() without a binary rejects with that error, and starts nothing", async () => {
  const alone = mkdtempSync(join(tmpdir(), "sandguard-alone-"));
  try {
    mkdirSync(join(alone, "node_modules"));
    cpSync(join(project(), "node_modules", "sandguard"), join(alone, "node_modules", "sandguard"), { recursive: true });
    const r = spawnSync(
      process.execPath,
      ["-e", "require('sandguard').guard().then(() => console.log('started'), (e) => console.log(e.name + ': ' + e.message + ' | ' + (process.env.SANDGUARD_SESSION ?? 'no session')))"],
      { cwd: alone, encoding: "utf8", env: guardedEnv(alone) },
    );
    assert.match(r.stdout, /^SandguardError: cannot find the sandguard binary.* \| no session$/m, r.stdout + r.stderr);
  } finally {
    rmSync(alone, { recursive: true, force: true });
  }
});
