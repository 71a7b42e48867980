/**
 * The guard object: {@link Guard} (made by {@link guard}), one running sidecar guarding this
 * process, from its start to its `bye`. The JavaScript twin of the Python helper's `Guard`:
 * the same sidecar (`sandguard watch`), the same `ready` line, the same control lines and the
 * same outcome line; no second protocol.
 *
 * Decisions:
 * - **Started detached and daemonized.** `sandguard watch --daemonize` in its own session
 *   (`detached: true`: a Ctrl-C to the program's process group does not reach it); it forks
 *   once more, so the sidecar is nobody's child and keeps nothing of this process's event
 *   loop alive. It guards this process by pid and start time (a pidfd on its side): SIGKILL
 *   of node is its business, as everywhere.
 * - **The environment.** While the guard is open, `process.env` carries the session as the
 *   wrapper exports it (`SANDGUARD_SESSION`, `SANDGUARD_LABELS`, `SANDGUARD_CONFIG` with
 *   `config`), plus every `NAME=VALUE` of the ready line (`DOCKER_HOST` with `dockerProxy`,
 *   `E2B_API_URL`/`DAYTONA_API_URL` with `cloudProxy`), so SDKs that read them at client
 *   creation go through the proxies unchanged. `close()` puts back what each variable was
 *   (see `restoreEnv`).
 * - **No `SANDGUARD_FD` in `process.env`.** The Python helper exports it because its pipe is
 *   inherited across `exec`; Node passes a child only the descriptors its `stdio` names, so
 *   the number would name nothing in a child, or worse, some other pipe of the child's, which
 *   `sandguard claim` would then write into. {@link Guard.spawnOptions} puts the pipe in the
 *   child's `stdio` and sets `SANDGUARD_FD` to its index in that child's `env` only.
 * - **Claims are confirmed.** `claim`, `release` and `detach` run the binary's `sandguard
 *   VERB PROVIDER ID` on the control pipe: it resolves once the sidecar has journaled the line
 *   and rejects with the sidecar's reason (a provider not configured, an id no provider would
 *   name, a sandbox of another live session), the one confirmed path every helper shares.
 * - **The end.** `close()` says `bye` and waits (30 s at most, `wait`) for the sidecar's word
 *   on the reclaim, resolving to an {@link Outcome}; something left is a warning, or a
 *   {@link ReclaimIncomplete} with `strict`. A program that ends without `close()`, normally
 *   or by `process.exit()`, says `bye` from a `process.on("exit")` handler and waits as long,
 *   synchronously (nothing asynchronous runs there). A signal that kills node (SIGINT's
 *   default, SIGKILL) is left to the sidecar's watch of the pid.
 * - **Heartbeats.** `renew` every 5 s (`renewEvery`, `null` for none) from an unref'd timer;
 *   the first one starts the lease (`grace`, default 10m), so a process frozen for longer than
 *   the grace loses its sandboxes too. A busy event loop delays them: pick the grace to match.
 */

import { spawn, type SpawnOptions, type StdioOptions } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, fstatSync, writeSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { findBinary } from "./binary";
import {
  describe,
  type Outcome,
  outcome,
  parseOutcome,
  ReclaimIncomplete,
  SandguardError,
} from "./errors";
import { LABEL_OWNER, LABEL_SESSION, ownerLabel } from "./identity";
import { fifos, LineReader } from "./pipe";

/** How often a heartbeat is sent, in ms. */
export const RENEW_EVERY = 5_000;
/** How long `close()` (and the exit handler) waits for the sidecar's word, in ms. */
export const WAIT_TIMEOUT = 30_000;
/** How long to wait for the sidecar's `ready` line, in ms. */
export const READY_TIMEOUT = 10_000;

/** What the sidecar says when a write finds its pipe without a reader (as the Rust CLI says). */
const GONE = "the session's sidecar is gone; nothing was recorded";

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const PROVIDER = /^[a-z0-9][a-z0-9_-]{0,31}$/;
const MAX_ID = 512;

/** Options of {@link guard}. Times are milliseconds. */
export interface GuardOptions {
  /** The sandguard executable (default: {@link findBinary}). */
  binary?: string;
  /** A config file (`--config`); default: sandguard's own lookup. */
  config?: string;
  /** The lease grace, e.g. `"10m"` (`--grace`): how long the sidecar waits for a missed heartbeat. */
  grace?: string;
  /** Between heartbeats; `null` sends none (no lease). Default 5000. */
  renewEvery?: number | null;
  /** How long `close()` waits for the sidecar's word on the reclaim; `null`: no wait. Default 30000. */
  wait?: number | null;
  /** How long to wait for the sidecar to be ready. Default 10000. */
  readyTimeout?: number;
  /**
   * Serve a Docker API proxy that labels and claims what it creates (`--docker-proxy`); its
   * address is exported as `DOCKER_HOST`; `true` fails the guard's start when no Docker
   * daemon answers. `"auto"`: only when a Docker daemon answers.
   */
  dockerProxy?: boolean | "auto";
  /**
   * Serve the cloud providers' API proxies (`--cloud-proxy`); their addresses are exported
   * as the ready line names them (`E2B_API_URL`, `DAYTONA_API_URL`). `"auto"`: for those
   * configured, none being no error.
   */
  cloudProxy?: boolean | "auto";
  /** `close()` rejects with {@link ReclaimIncomplete} when the reclaim left something. */
  strict?: boolean;
  /**
   * At most this many sandboxes alive at once (`--max-sandboxes`): a create through the
   * proxies over it fails in the client's own error, whose message starts
   * `sandguard: limit \`sandboxes\` reached`.
   */
  maxSandboxes?: number;
  /** At most this many sandboxes created over the guard's life (`--max-creates`). */
  maxCreates?: number;
  /**
   * No sandbox older than this, e.g. `"2h"` (`--max-lifetime`): at that age the guard's own
   * sandbox is removed while this process runs, and the proxies stamp the limit into each
   * create (`sandguard.expires`, E2B's timeout).
   */
  maxLifetime?: string;
  /**
   * At most this much spent, sandbox time (`"20h"`) or money at the configured prices
   * (`"$5"`) (`--max-spend`): creates through the proxies past it are refused.
   */
  maxSpend?: string;
  /** `"reclaim"`: at the spend limit also remove every sandbox the guard holds (`--on-spend`). */
  onSpend?: "refuse" | "reclaim";
}

/** `PROVIDER ID`, checked as the sidecar's parser checks it (src/protocol/mod.rs). */
function checkTarget(provider: string, id: string): void {
  if (typeof provider !== "string" || !PROVIDER.test(provider)) {
    throw new TypeError(`invalid provider name ${JSON.stringify(provider)}: expected [a-z0-9][a-z0-9_-]{0,31}`);
  }
  if (typeof id !== "string" || id.length < 1 || id.length > MAX_ID || !/^[!-~]+$/.test(id)) {
    throw new TypeError(
      `invalid sandbox id ${JSON.stringify(String(id).slice(0, 80))}: expected 1 to ${MAX_ID} characters of printable ASCII`,
    );
  }
}

/**
 * The variables of a `ready SESSION [NAME=VALUE ...]` line for this session (a third word
 * without `=` is the older form of `DOCKER_HOST`). Throws for anything else.
 */
export function parseReady(line: string, session: string): Record<string, string> {
  const words = line.split(/\s+/).filter(Boolean);
  if (words[0] === "error") throw new SandguardError(`the sidecar failed to start: ${line.slice(6)}`);
  if (words.length === 0) throw new SandguardError("the sidecar exited before it was ready");
  if (words[0] !== "ready" || words.length < 2) {
    throw new SandguardError(`unexpected answer from the sidecar: ${JSON.stringify(line.slice(0, 200))}`);
  }
  if (words[1] !== session) {
    throw new SandguardError(`the sidecar answered for session ${JSON.stringify(words[1].slice(0, 80))}, not ${session}`);
  }
  const env: Record<string, string> = {};
  words.slice(2).forEach((word, i) => {
    const eq = word.indexOf("=");
    if (eq < 0 && i === 0) {
      env.DOCKER_HOST = word;
    } else if (eq < 0 || !ENV_NAME.test(word.slice(0, eq))) {
      throw new SandguardError(`unexpected word in the sidecar's ready line: ${JSON.stringify(word.slice(0, 200))}`);
    } else {
      env[word.slice(0, eq)] = word.slice(eq + 1);
    }
  });
  return env;
}

/** Runs `sandguard VERB PROVIDER ID` on the control pipe `fd`; rejects with its error. */
export function runCli(
  binary: string,
  verb: string,
  provider: string,
  id: string,
  fd: number,
  env: NodeJS.ProcessEnv,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(binary, [verb, provider, id], {
      stdio: ["ignore", "ignore", "pipe", fd],
      env: { ...env, SANDGUARD_FD: "3" },
    });
    let stderr = "";
    child.stderr!.setEncoding("utf8").on("data", (d: string) => {
      stderr += d;
    });
    child.on("error", (e) => reject(new SandguardError(`cannot run ${binary}: ${e.message}`)));
    child.on("close", (code) => {
      if (code === 0) return resolve();
      const said = stderr.trim().split("\n").filter(Boolean);
      let message = said.length ? said[said.length - 1] : `sandguard ${verb} exited ${code}`;
      if (message.startsWith("sandguard: ")) message = message.slice("sandguard: ".length);
      reject(new SandguardError(message));
    });
  });
}

/** The guards open in this process, the most recent last (module-level `claim` speaks for it). */
const openGuards: Guard[] = [];

/** What each variable a guard exports was before the first open guard exported it. */
const baseline: Record<string, string | undefined> = {};

/** The variable no guard exports and every open guard hides (see `export`). */
const HIDDEN = "SANDGUARD_FD";

/** The most recent guard this process opened and has not closed. */
export function currentGuard(): Guard | undefined {
  return openGuards[openGuards.length - 1];
}

/** A running sidecar guarding this process. Made by {@link guard}. */
export class Guard {
  /** The session id (32 hex digits). */
  readonly session: string;
  /** The guarded process (the one that made the guard). */
  readonly pid: number;
  /** What `close()` resolved to (`null` while open). */
  outcome: Outcome | null = null;

  private readonly owner: string;
  private readonly binary: string;
  private readonly waitMs: number | null;
  private readonly strict: boolean;
  private control: number | null;
  private reader: LineReader | null;
  /** @internal */
  exported: Record<string, string> = {};
  private saved: Record<string, string | undefined> = {};
  private renewer: NodeJS.Timeout | null = null;
  private closing: Promise<Outcome> | null = null;
  private readonly onExit = () => this.closeSync();

  /** @internal Use {@link guard}. */
  constructor(
    init: { session: string; owner: string; binary: string; control: number; reader: LineReader; ready: Record<string, string> },
    options: GuardOptions,
  ) {
    this.session = init.session;
    this.owner = init.owner;
    this.pid = process.pid;
    this.binary = init.binary;
    this.control = init.control;
    this.reader = init.reader;
    this.waitMs = options.wait === undefined ? WAIT_TIMEOUT : options.wait;
    this.strict = options.strict ?? false;
    this.export(init.ready, options.config);
    openGuards.push(this);
    process.on("exit", this.onExit);
    const every = options.renewEvery === undefined ? RENEW_EVERY : options.renewEvery;
    if (every) {
      this.renewer = setInterval(() => {
        try {
          this.renew();
        } catch {
          this.stopRenewing();
        }
      }, every);
      this.renewer.unref();
    }
  }

  // -- the environment

  private export(ready: Record<string, string>, config: string | undefined): void {
    const env: Record<string, string> = {
      SANDGUARD_SESSION: this.session,
      SANDGUARD_LABELS: this.labelsEnv,
    };
    if (config !== undefined) env.SANDGUARD_CONFIG = resolvePath(config);
    Object.assign(env, ready);
    for (const name of Object.keys(env)) {
      if (!(name in baseline)) baseline[name] = process.env[name];
    }
    // A `SANDGUARD_FD` inherited from a wrapper (`sandguard -- node app.js`) would pair that
    // session's pipe with this guard's session in a child: hidden while a guard is open.
    if (!(HIDDEN in baseline)) baseline[HIDDEN] = process.env[HIDDEN];
    delete process.env[HIDDEN];
    this.exported = env;
    Object.assign(process.env, env);
  }

  /**
   * Puts back what this guard exported: a variable the program changed meanwhile keeps its
   * value; one another open guard also exports takes the most recent such guard's value (so
   * closing guards out of order never leaves a closed session's variables behind); the rest
   * get what they were before the first guard that exported them.
   */
  private restoreEnv(): void {
    for (const [name, value] of Object.entries(this.exported)) {
      const still = [...openGuards].reverse().find((g) => name in g.exported);
      if (process.env[name] === value) {
        const old = still ? still.exported[name] : baseline[name];
        if (old === undefined) delete process.env[name];
        else process.env[name] = old;
      }
      if (!still) delete baseline[name];
    }
    if (openGuards.length === 0) {
      const old = baseline[HIDDEN];
      if (old !== undefined && process.env[HIDDEN] === undefined) process.env[HIDDEN] = old;
      delete baseline[HIDDEN];
    }
  }

  /** The variables this guard exported to `process.env` (`SANDGUARD_*` and the ready line's). */
  get env(): Record<string, string> {
    return { ...this.exported };
  }

  /** The labels to stamp on every sandbox: `{"sandguard.owner": ..., "sandguard.session": ...}`. */
  get labels(): Record<string, string> {
    return { [LABEL_OWNER]: this.owner, [LABEL_SESSION]: this.session };
  }

  /** The labels as `SANDGUARD_LABELS` carries them: `k=v,k=v`. */
  get labelsEnv(): string {
    return Object.entries(this.labels)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
  }

  /** The labels as Docker CLI arguments: `["--label", "k=v", ...]`. */
  labelArgs(flag = "--label"): string[] {
    return this.labelsEnv.split(",").flatMap((kv) => [flag, kv]);
  }

  get closed(): boolean {
    return this.control === null;
  }

  private openControl(): number {
    if (this.control === null) throw new SandguardError("the guard is closed");
    if (process.pid !== this.pid) throw new SandguardError("only the guarded process can talk to its sidecar");
    return this.control;
  }

  // -- what the owner says

  /**
   * Tell the sidecar this sandbox is ours (for sandboxes that carry no labels). Resolves once
   * the sidecar has journaled it; rejects with its reason when refused.
   */
  claim(provider: string, id: string): Promise<void> {
    return this.confirmed("claim", provider, id);
  }

  /** We removed this sandbox ourselves; the sidecar forgets it (confirmed). */
  release(provider: string, id: string): Promise<void> {
    return this.confirmed("release", provider, id);
  }

  /** This sandbox should outlive us (its TTL still applies; confirmed). */
  detach(provider: string, id: string): Promise<void> {
    return this.confirmed("detach", provider, id);
  }

  private async confirmed(verb: string, provider: string, id: string): Promise<void> {
    checkTarget(provider, id);
    const fd = this.openControl();
    await runCli(this.binary, verb, provider, id, fd, { ...process.env, ...this.exported });
  }

  /** A heartbeat (sent every 5 s unless `renewEvery: null`). */
  renew(): void {
    this.send("renew\n");
  }

  private send(line: string): void {
    const fd = this.openControl();
    try {
      writeSync(fd, line);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EPIPE") {
        throw new SandguardError(`${GONE} (it was killed, or its session has ended: see \`sandguard sessions\`)`);
      }
      throw e;
    }
  }

  private stopRenewing(): void {
    if (this.renewer !== null) clearInterval(this.renewer);
    this.renewer = null;
  }

  // -- child processes

  /**
   * `options` for `child_process.spawn`, `spawnSync` or `execFileSync` of a child that talks
   * to this guard's sidecar: the control pipe added to `stdio` after what is given (index 3
   * or beyond), and `env` (default `process.env`) with this guard's variables and
   * `SANDGUARD_FD` naming that index. Not for `exec`/`execFile`, which take no `stdio`; for
   * `fork`, give `stdio` with its `"ipc"` entry.
   *
   *     spawn(findBinary(), ["claim", "docker", id], g.spawnOptions({ stdio: "inherit" }))
   */
  spawnOptions<T extends SpawnOptions>(options?: T): T & { stdio: StdioOptions; env: NodeJS.ProcessEnv } {
    const fd = this.openControl();
    const given = options?.stdio ?? "pipe";
    const stdio: (string | number | null | undefined | object)[] =
      typeof given === "string" ? [given, given, given] : [...(given as unknown[] as (string | number | null)[])];
    while (stdio.length < 3) stdio.push("pipe");
    const index = stdio.length;
    stdio.push(fd);
    const env = { ...(options?.env ?? process.env), ...this.exported, SANDGUARD_FD: String(index) };
    return { ...(options as T), stdio: stdio as StdioOptions, env };
  }

  /**
   * `base` (default `process.env`) plus this guard's variables, for a child given its own
   * `env` that does not talk to the sidecar (it has no `SANDGUARD_FD`: see `spawnOptions`).
   */
  childEnv(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
    this.openControl();
    return { ...base, ...this.exported };
  }

  // -- the end

  /** Stops everything but the pipes' ends; `null` when closed already. */
  private begin(): { control: number; reader: LineReader } | null {
    if (this.control === null || this.reader === null || process.pid !== this.pid) return null;
    const ends = { control: this.control, reader: this.reader };
    this.control = null;
    this.reader = null;
    this.stopRenewing();
    const i = openGuards.indexOf(this);
    if (i >= 0) openGuards.splice(i, 1);
    process.removeListener("exit", this.onExit);
    this.restoreEnv();
    try {
      writeSync(ends.control, "bye\n");
    } catch {
      // The sidecar is gone already: its EOF says so below.
    }
    closeSync(ends.control);
    return ends;
  }

  private finish(reader: LineReader, line: string | null, waited: number): Outcome {
    closeSync(reader.fd);
    let o: Outcome;
    if (line === null) o = this.unknown(`the sidecar said nothing within ${waited / 1000} s`);
    else if (line === "") o = outcome("unknown", "the sidecar was gone");
    else o = parseOutcome(line) ?? this.unknown(`unexpected answer from the sidecar: ${JSON.stringify(line.slice(0, 200))}`);
    this.outcome = o;
    if (o.state === "left") {
      console.warn(
        `sandguard: session ${this.session}: the reclaim after bye ${describe(o)} (the session is pending; \`sandguard sweep\` retries)`,
      );
    }
    return o;
  }

  private unknown(why: string): Outcome {
    console.warn(`sandguard: session ${this.session}: ${why}`);
    return outcome("unknown", why);
  }

  /**
   * Say `bye`: the sidecar reclaims everything still owned now and ends the session. Then
   * wait (the guard's `wait`, 30 s by default; `null`: not at all) for its word on that
   * reclaim and resolve to it (also kept as `.outcome`). Puts `process.env` back. Idempotent:
   * a second call resolves to the same outcome.
   */
  close(): Promise<Outcome> {
    if (this.closing) return this.closing;
    const ends = this.begin();
    if (ends === null) return Promise.resolve(this.outcome ?? outcome("unknown", "not the guarded process"));
    this.closing = (async () => {
      let o: Outcome;
      if (this.waitMs === null) {
        closeSync(ends.reader.fd);
        o = this.outcome = outcome("unknown", "not waited for");
      } else {
        o = this.finish(ends.reader, await ends.reader.readLine(this.waitMs), this.waitMs);
      }
      if (this.strict && o.state === "left") throw new ReclaimIncomplete(o);
      return o;
    })();
    return this.closing;
  }

  /** `close()` for `process.on("exit")`: the same, blocking (see the module's decisions). */
  closeSync(): Outcome {
    const ends = this.begin();
    if (ends === null) return this.outcome ?? outcome("unknown", "closed already");
    if (this.waitMs === null) {
      closeSync(ends.reader.fd);
      return (this.outcome = outcome("unknown", "not waited for"));
    }
    return this.finish(ends.reader, ends.reader.readLineSync(this.waitMs), this.waitMs);
  }

  /**
   * `await using g = await guard()`: `close()` when the block ends (TypeScript 5.2+; Node
   * defines `Symbol.asyncDispose` from 18.18 and 20.4). The outcome is kept as `.outcome`.
   */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  toString(): string {
    return `Guard(session=${this.session}, pid=${this.pid}, ${this.closed ? "closed" : "open"})`;
  }
}

/**
 * Start a sidecar guarding this process and wait (10 s at most) for it to be ready:
 *
 *     const g = await guard({ dockerProxy: true });
 *     try { ... } finally { await g.close(); }
 *
 * or `await using g = await guard()` where the language has it. Rejects with
 * {@link SandguardError} when the sidecar cannot start or is not ready in time.
 */
export async function guard(options: GuardOptions = {}): Promise<Guard> {
  if (process.platform !== "linux" && process.platform !== "darwin") {
    throw new SandguardError(`sandguard runs on Linux and macOS only (this is ${process.platform})`);
  }
  const binary = options.binary ?? findBinary();
  const session = randomBytes(16).toString("hex");
  const owner = ownerLabel(process.pid, binary);
  const start = owner.split("-")[3];
  const argv: string[] = [];
  if (options.config !== undefined) argv.push("--config", options.config);
  argv.push("watch", "--daemonize", "--session", session);
  argv.push("--owner-pid", String(process.pid), "--owner-start", start, "--control-fd", "3");
  if (options.grace !== undefined) argv.push("--grace", options.grace);
  for (const [flag, when] of [
    ["--docker-proxy", options.dockerProxy],
    ["--cloud-proxy", options.cloudProxy],
  ] as const) {
    if (when === true) argv.push(flag);
    else if (when === "auto") argv.push(`${flag}=auto`);
  }
  for (const [flag, limit] of [
    ["--max-sandboxes", options.maxSandboxes],
    ["--max-creates", options.maxCreates],
  ] as const) {
    if (limit !== undefined) argv.push(flag, String(Math.trunc(limit)));
  }
  for (const [flag, value] of [
    ["--max-lifetime", options.maxLifetime],
    ["--max-spend", options.maxSpend],
    ["--on-spend", options.onSpend],
  ] as const) {
    if (value !== undefined) argv.push(flag, value);
  }
  const [control, out] = fifos(2);
  const reader = new LineReader(out.read);
  let failed: Error | null = null;
  try {
    try {
      const child = spawn(binary, argv, {
        stdio: ["ignore", out.write, "ignore", control.read],
        detached: true,
      });
      child.on("error", (e) => {
        failed = e;
      });
      child.unref();
    } finally {
      closeSync(out.write); // EOF on the reader now means the sidecar is gone
      closeSync(control.read);
    }
    const line = await reader.readLine(options.readyTimeout ?? READY_TIMEOUT);
    if (line === null) throw new SandguardError(`the sidecar was not ready within ${(options.readyTimeout ?? READY_TIMEOUT) / 1000} s`);
    if (line === "" && failed !== null) {
      throw new SandguardError(`cannot start the sidecar ${binary}: ${(failed as Error).message}`);
    }
    const ready = parseReady(line, session);
    return new Guard({ session, owner, binary, control: control.write, reader, ready }, options);
  } catch (e) {
    closeSync(out.read);
    closeSync(control.write);
    throw e;
  }
}

/** `$SANDGUARD_FD` when it names an open pipe (`sandguard -- node app.js`, or a parent's guard). */
function inheritedFd(): number | null {
  const fd = Number.parseInt(process.env.SANDGUARD_FD ?? "", 10);
  if (!Number.isInteger(fd) || fd < 0) return null;
  try {
    return fstatSync(fd).isFIFO() ? fd : null;
  } catch {
    return null;
  }
}

async function send(verb: string, provider: string, id: string): Promise<void> {
  const g = currentGuard();
  if (g !== undefined) {
    await (verb === "claim" ? g.claim(provider, id) : verb === "release" ? g.release(provider, id) : g.detach(provider, id));
    return;
  }
  checkTarget(provider, id);
  const fd = inheritedFd();
  if (fd === null) {
    throw new SandguardError(
      "not in a sandguard session: no guard is open in this process and $SANDGUARD_FD names no open pipe " +
        "(a child needs the pipe in its stdio: g.spawnOptions())",
    );
  }
  await runCli(findBinary(), verb, provider, id, fd, process.env);
}

/**
 * Claim a sandbox for the current session: the guard this process opened last, else the
 * session whose pipe `$SANDGUARD_FD` names (a program under `sandguard -- node app.js`, or a
 * child started with `g.spawnOptions()`). Rejects outside a session.
 */
export function claim(provider: string, id: string): Promise<void> {
  return send("claim", provider, id);
}

/** {@link claim}'s counterpart for a sandbox the program removed itself. */
export function release(provider: string, id: string): Promise<void> {
  return send("release", provider, id);
}

/** Keep a sandbox beyond the session (its TTL still applies); see {@link claim}. */
export function detach(provider: string, id: string): Promise<void> {
  return send("detach", provider, id);
}
