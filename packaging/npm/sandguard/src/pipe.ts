/**
 * The two pipes between this process and its sidecar, and reading lines from them without a
 * stream: {@link fifoPair}, {@link LineReader}.
 *
 * Decisions:
 * - **Real pipes (FIFOs), not Node's `stdio: "pipe"`.** libuv makes `"pipe"` a socketpair,
 *   and the sidecar and `sandguard claim` take only a pipe as the control descriptor (the
 *   same kind the wrapper and the Python helper pass). Node has no `pipe(2)`, so each pipe is
 *   a FIFO made by `mkfifo` in a private directory (mode 0700, the FIFO 0600), opened at both
 *   ends and unlinked at once: no name is left behind, and nobody else could open it. So
 *   `guard()` needs a `mkfifo` executable (coreutils or busybox); an image without one gets
 *   a {@link SandguardError} saying so.
 * - **The read end is opened non-blocking** (a FIFO's open blocks until the other end is
 *   opened otherwise); a read that finds nothing gets EAGAIN, and {@link LineReader} waits a
 *   little (1 ms, doubling to 25 ms) and tries again: with timers while the event loop runs, with `Atomics.wait` in a
 *   `process.on("exit")` handler, where nothing asynchronous runs any more.
 * - Writes go through `fs.writeSync` on the write end (blocking, < PIPE_BUF: one line is one
 *   atomic write). Node ignores SIGPIPE, so a sidecar that is gone is an EPIPE error.
 */

import { spawnSync } from "node:child_process";
import { closeSync, constants, mkdtempSync, openSync, read, readSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SandguardError } from "./errors";

/** One pipe: its read end (non-blocking) and write end. */
export interface Fifo {
  read: number;
  write: number;
}

/** Makes `count` pipes (see the module's decisions). */
export function fifos(count: number): Fifo[] {
  const dir = mkdtempSync(join(tmpdir(), "sandguard-"));
  const made: Fifo[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const path = join(dir, `pipe${i}`);
      const r = spawnSync("mkfifo", ["-m", "600", path], { stdio: ["ignore", "ignore", "pipe"] });
      if (r.error || r.status !== 0) {
        const why = r.error ? r.error.message : String(r.stderr).trim();
        throw new SandguardError(`cannot make a pipe for the sidecar (mkfifo ${path}): ${why}`);
      }
      const readEnd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
      let writeEnd: number;
      try {
        writeEnd = openSync(path, constants.O_WRONLY);
      } catch (e) {
        closeSync(readEnd);
        throw e;
      }
      made.push({ read: readEnd, write: writeEnd });
    }
    return made;
  } catch (e) {
    for (const f of made) {
      closeSync(f.read);
      closeSync(f.write);
    }
    throw e;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * How long to wait between reads that found nothing: 1 ms at first, doubling to 25 ms, so a
 * quick answer (the `ready` line, a few ms) is read at once and a long wait (a reclaim after
 * `bye`, up to 30 s) costs about 40 wake-ups a second, not 500.
 */
const POLL_FIRST_MS = 1;
const POLL_MAX_MS = 25;

const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** A line read: its text (without the newline), `""` at EOF, `null` when the time ran out. */
export type LineResult = string | null;

/** Reads lines from a non-blocking pipe, keeping what it read beyond the line. */
export class LineReader {
  private buf = Buffer.alloc(0);
  private eof = false;

  constructor(readonly fd: number) {}

  /** A line, or EOF's `""`, if one is in hand. */
  private take(): LineResult | undefined {
    const nl = this.buf.indexOf(10);
    if (nl >= 0) {
      const line = this.buf.subarray(0, nl).toString("utf8");
      this.buf = this.buf.subarray(nl + 1);
      return line;
    }
    if (!this.eof) return undefined;
    // A last line without its newline is still a line; then EOF's "".
    const rest = this.buf.toString("utf8");
    this.buf = Buffer.alloc(0);
    return rest;
  }

  private got(chunk: Buffer, n: number): void {
    if (n === 0) this.eof = true;
    else this.buf = Buffer.concat([this.buf, chunk.subarray(0, n)]);
  }

  /** The next line within `timeoutMs`, blocking the thread (for `process.on("exit")`). */
  readLineSync(timeoutMs: number): LineResult {
    const deadline = Date.now() + timeoutMs;
    const chunk = Buffer.alloc(4096);
    let pause = POLL_FIRST_MS;
    for (;;) {
      const line = this.take();
      if (line !== undefined) return line;
      try {
        this.got(chunk, readSync(this.fd, chunk, 0, chunk.length, null));
        continue;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EAGAIN") throw e;
      }
      const left = deadline - Date.now();
      if (left <= 0) return null;
      Atomics.wait(sleeper, 0, 0, Math.min(pause, left));
      pause = Math.min(pause * 2, POLL_MAX_MS);
    }
  }

  /** The next line within `timeoutMs`, without blocking the event loop. */
  async readLine(timeoutMs: number): Promise<LineResult> {
    const deadline = Date.now() + timeoutMs;
    const chunk = Buffer.alloc(4096);
    let pause = POLL_FIRST_MS;
    for (;;) {
      const line = this.take();
      if (line !== undefined) return line;
      const n = await new Promise<number | null>((resolve, reject) =>
        read(this.fd, chunk, 0, chunk.length, null, (err, bytes) => {
          if (!err) resolve(bytes);
          else if (err.code === "EAGAIN") resolve(null);
          else reject(err);
        }),
      );
      if (n !== null) {
        this.got(chunk, n);
        continue;
      }
      const left = deadline - Date.now();
      if (left <= 0) return null;
      await new Promise((r) => setTimeout(r, Math.min(pause, left)));
      pause = Math.min(pause * 2, POLL_MAX_MS);
    }
  }
}
