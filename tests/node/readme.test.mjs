// README's Node snippet (the block marked `<!-- readme: run node-guard -->`), run as README.md
// writes it, from the package npm installed, against the real daemon: the three containers it
// makes (labelled, claimed, claimed by a child) are gone once `close()` has resolved. The
// block is read out of README.md, so the two cannot drift apart (tests/readme.rs checks that
// every block is either run or says why not).

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { docker, exists, guardedEnv, IMAGE, removeQuietly, run, scratch } from "./support.mjs";

const README = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "README.md");

function block(name) {
  const lines = readFileSync(README, "utf8").split("\n");
  const want = `<!-- readme: run ${name}`;
  const at = lines.findIndex((l) => l.trim().startsWith(want));
  assert.ok(at >= 0, `README has no block marked ${want}`);
  assert.ok(lines[at + 1].startsWith("```"), `no code block after ${want}`);
  const end = lines.findIndex((l, i) => i > at + 1 && l.startsWith("```"));
  return lines.slice(at + 2, end).join("\n");
}

test("README's Node snippet runs as written, and what it made is gone when close() resolves", async (t) => {
  // The snippet says `busybox`: a local tag of the test image (nothing is pulled).
  docker("tag", IMAGE, "busybox:latest");
  const since = docker("system", "info", "--format", "{{.SystemTime}}");
  const out = await run("readme-snippet.mjs", block("node-guard"), guardedEnv(scratch()));
  const until = docker("system", "info", "--format", "{{.SystemTime}}");
  const made = docker("events", "--since", since, "--until", until, "--filter", "event=create", "--filter", "image=busybox", "--format", "{{.Actor.ID}}")
    .split("\n")
    .filter(Boolean);
  t.after(() => removeQuietly(...made));
  assert.equal(out.code, 0, out.stderr);
  assert.equal(made.length, 3, `the snippet made three containers: ${out.stdout}`);
  assert.deepEqual(made.filter(exists), [], "all gone once close() resolved");
  assert.match(out.stdout, /state: 'clean'/);
});
