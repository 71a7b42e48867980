// The documentation's Node snippet (the block marked `<!-- readme: run node-guard -->`, in the
// book's SDK chapter), run as it is written, from the package npm installed, against the real
// daemon: the three containers it makes (labelled, claimed, claimed by a child) are gone once
// `close()` has resolved. The block is read out of the documentation (README.md and
// book/src/*.md), so the two cannot drift apart (tests/cli/readme.rs checks that every block is
// either run or says why not).

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { docker, exists, guardedEnv, IMAGE, removeQuietly, run, scratch } from "./support.mjs";

const REPO = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

// The documentation, in tests/cli/readme.rs's order: README.md, then book/src/*.md by name.
function docs() {
  const chapters = readdirSync(join(REPO, "book", "src"))
    .filter((name) => name.endsWith(".md"))
    .sort()
    .map((name) => join(REPO, "book", "src", name));
  return [join(REPO, "README.md"), ...chapters];
}

function block(name) {
  const want = `<!-- readme: run ${name}`;
  for (const path of docs()) {
    const lines = readFileSync(path, "utf8").split("\n");
    const at = lines.findIndex((l) => l.trim().startsWith(want) && l.trim().split(/\s+/)[3] === name);
    if (at < 0) continue;
    assert.ok(lines[at + 1].startsWith("```"), `no code block after ${want} in ${path}`);
    const end = lines.findIndex((l, i) => i > at + 1 && l.startsWith("```"));
    return lines.slice(at + 2, end).join("\n");
  }
  assert.fail(`neither README.md nor book/src/*.md has a block marked ${want}`);
}

test("the documentation's Node snippet runs as written, and what it made is gone when close() resolves", async (t) => {
  // The snippet runs IMAGE, the test image tests/engine.sh made (nothing is pulled).
  const since = docker("system", "info", "--format", "{{.SystemTime}}");
  const out = await run("readme-snippet.mjs", block("node-guard"), guardedEnv(scratch()));
  const until = docker("system", "info", "--format", "{{.SystemTime}}");
  const made = docker("events", "--since", since, "--until", until, "--filter", "event=create", "--filter", `image=${IMAGE.replace(/:latest$/, "")}`, "--format", "{{.Actor.ID}}")
    .split("\n")
    .filter(Boolean);
  t.after(() => removeQuietly(...made));
  assert.equal(out.code, 0, out.stderr);
  assert.equal(made.length, 3, `the snippet made three containers: ${out.stdout}`);
  assert.deepEqual(made.filter(exists), [], "all gone once close() resolved");
  assert.match(out.stdout, /state: 'clean'/);
});
