// What the Node tests share: the scratch project the packages were installed into, a guarded
// program's environment, running such a program, and Docker.
//
// tests/run.sh builds the packages (`npm pack`), installs them from their tarballs into a
// scratch project together with the vendors' packages from npm (e2b, testcontainers), and
// runs `node --test tests/node` with SANDGUARD_NODE_PROJECT naming that project. The guarded
// programs are written into the project (so that `require("sandguard")` finds what npm
// installed) and run as their own node processes: a test can SIGKILL them.

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const IMAGE = "sandguard-test/busybox:latest";

/** The scratch project; a test run outside tests/run.sh fails here, saying how to run it. */
export function project() {
  const dir = process.env.SANDGUARD_NODE_PROJECT;
  assert.ok(dir, "SANDGUARD_NODE_PROJECT is not set: run the Node tests through tests/run.sh");
  return dir;
}

/** A fresh directory for one test's program: its HOME, config and state. */
export function scratch() {
  return mkdtempSync(join(project(), "t-"));
}

/**
 * What testcontainers-node needs on this machine, none of it about sandguard: the host named
 * outright (the test daemon runs without a bridge network, where testcontainers looks for a
 * gateway). Not TESTCONTAINERS_RYUK_DISABLED: the Docker proxy gives the program that itself
 * (Ryuk's image could not be pulled here, so a test through the proxy fails without it).
 */
const TESTCONTAINERS = { TESTCONTAINERS_HOST_OVERRIDE: "localhost" };

/**
 * The environment of a guarded program: its own HOME, config and state, no SANDGUARD_* of the
 * runner's, and no sandguard on PATH (the package must find its platform package's binary).
 */
export function guardedEnv(dir, extra = {}) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith("SANDGUARD_") && !k.startsWith("E2B_") && k !== "DOCKER_HOST" && k !== "TESTCONTAINERS_RYUK_DISABLED") env[k] = v;
  }
  env.PATH = (process.env.PATH ?? "")
    .split(":")
    .filter((d) => d && !existsExecutable(join(d, "sandguard")))
    .join(":");
  return { ...env, HOME: dir, XDG_CONFIG_HOME: join(dir, "config"), XDG_STATE_HOME: join(dir, "state"), NO_COLOR: "1", ...TESTCONTAINERS, ...extra };
}

function existsExecutable(path) {
  try {
    execFileSync("test", ["-x", path]);
    return true;
  } catch {
    return false;
  }
}

/** Writes `source` as `name` in the project and starts it with node; lines of its stdout arrive on `.lines`. */
export function start(name, source, env, args = []) {
  const path = join(project(), name);
  writeFileSync(path, source);
  const child = spawn(process.execPath, [path, ...args], { cwd: project(), env, stdio: ["ignore", "pipe", "pipe"] });
  child.stdoutText = "";
  child.stderrText = "";
  const waiting = [];
  child.stdout.setEncoding("utf8").on("data", (d) => {
    child.stdoutText += d;
    for (const w of waiting.splice(0)) w();
  });
  child.stderr.setEncoding("utf8").on("data", (d) => {
    child.stderrText += d;
  });
  child.exited = new Promise((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
  /** The first stdout line that parses as JSON with `key`, within `ms`. */
  child.said = async (key, ms = 60_000) => {
    const deadline = Date.now() + ms;
    for (;;) {
      for (const line of child.stdoutText.split("\n")) {
        try {
          const value = JSON.parse(line);
          if (value && typeof value === "object" && key in value) return value;
        } catch {}
      }
      if (child.exitCode !== null || Date.now() > deadline) {
        assert.fail(`the program never said ${key}; stdout: ${child.stdoutText}\nstderr: ${child.stderrText}`);
      }
      await new Promise((r) => {
        waiting.push(r);
        setTimeout(r, 100);
      });
    }
  };
  return child;
}

/**
 * Runs a program to its end: `{ code, signal, stdout, stderr }`. One that has not ended
 * within `ms` is SIGKILLed (its `signal` says so), so a hang fails its test, not the run.
 */
export async function run(name, source, env, args = [], ms = 120_000) {
  const child = start(name, source, env, args);
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  const { code, signal } = await child.exited;
  clearTimeout(timer);
  return { code, signal, stdout: child.stdoutText, stderr: child.stderrText };
}

export function docker(...args) {
  return execFileSync("docker", args, {
    encoding: "utf8",
    env: { ...process.env, DOCKER_HOST: "" },
    stdio: ["ignore", "pipe", "pipe"],
  }).trim();
}

/** Does a container exist (running or not)? */
export function exists(id) {
  try {
    docker("inspect", "--format", "{{.Id}}", id);
    return true;
  } catch {
    return false;
  }
}

/** A container nobody guards, removed after the test. */
export function bystander(t) {
  const id = docker("run", "-d", "--label", "sandguard.session=someone-elses", IMAGE, "sleep", "600");
  t.after(() => removeQuietly(id));
  return id;
}

export function removeQuietly(...ids) {
  for (const id of ids) {
    try {
      docker("rm", "-f", id);
    } catch {}
  }
}

/** Waits until `check()` is true, at most `ms`. */
export async function eventually(what, check, ms = 15_000) {
  const deadline = Date.now() + ms;
  while (!check()) {
    assert.ok(Date.now() < deadline, `not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
