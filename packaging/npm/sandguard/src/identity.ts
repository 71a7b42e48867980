/**
 * The owner's identity, exactly as the sidecar computes it (mirrors src/identity/mod.rs and the
 * Python helper's `_identity.py`): the `sandguard.owner` label a sandbox carries, and the
 * label names. A label that differs by one character from the sidecar's makes a sandbox
 * nobody's, so every field is read as the Rust side reads it: the machine id's and boot id's
 * first 16 hex digits, the start time from field 22 of `/proc/PID/stat` (after the last `)`,
 * since a process name may hold one), and the pid namespace's inode.
 */

import { execFileSync } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { SandguardError } from "./errors";

/** The label carrying the session id. */
export const LABEL_SESSION = "sandguard.session";
/** The label carrying the owner's identity. */
export const LABEL_OWNER = "sandguard.owner";

const UNKNOWN_MACHINE = "0000000000000000";

function read(path: string): string | null {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return null;
  }
}

/** The first 16 hex digits of an id, lower-case, everything else dropped. */
function shortHex(text: string): string {
  return text.replace(/[^0-9a-fA-F]/g, "").slice(0, 16).toLowerCase();
}

function machine(): string {
  for (const path of ["/etc/machine-id", "/var/lib/dbus/machine-id"]) {
    const text = read(path);
    if (text !== null) {
      const short = shortHex(text);
      return short.length === 16 ? short : UNKNOWN_MACHINE;
    }
  }
  return UNKNOWN_MACHINE;
}

/** Field 22 of /proc/PID/stat (clock ticks after boot), read after the last `)`. */
export function startTime(pid: number): string {
  const text = read(`/proc/${pid}/stat`);
  if (text === null) {
    throw new SandguardError(`cannot read /proc/${pid}/stat (sandguard needs Linux /proc)`);
  }
  return text.slice(text.lastIndexOf(")") + 1).trim().split(/\s+/)[22 - 3];
}

/**
 * The `sandguard.owner` label of a process (default: this one), exactly as the sidecar
 * computes it: `<machine16>-<boot16>-<pid>-<start>-<pidns>`. On Linux it is read here from
 * `/proc`, as the Rust side reads it; elsewhere (macOS has no `/proc`) the sandguard `binary`
 * is asked (`sandguard identity --pid PID`), so the label is the platform layer's own.
 */
export function ownerLabel(pid: number = process.pid, binary?: string): string {
  if (process.platform !== "linux") {
    if (binary === undefined) {
      throw new SandguardError("the owner label needs the sandguard binary on this platform");
    }
    try {
      const label = execFileSync(binary, ["identity", "--pid", String(pid)], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
        timeout: 10_000,
      }).trim();
      if (label !== "") return label;
    } catch (e) {
      throw new SandguardError(`${binary} identity --pid ${pid} failed: ${String(e)}`);
    }
    throw new SandguardError(`${binary} identity --pid ${pid} printed nothing`);
  }
  const boot = shortHex(read("/proc/sys/kernel/random/boot_id") ?? "");
  const base = `${machine()}-${boot}-${pid}-${startTime(pid)}`;
  try {
    return `${base}-${statSync("/proc/self/ns/pid").ino}`;
  } catch {
    return base;
  }
}
