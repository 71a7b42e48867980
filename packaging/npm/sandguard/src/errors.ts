/**
 * What the sidecar says back: {@link Outcome} (its word on the reclaim after `bye`), the
 * things it {@link Left}, and the errors this package throws ({@link SandguardError},
 * {@link ReclaimIncomplete}).
 *
 * The outcome line is the sidecar's (src/protocol/outcome.rs); {@link parseOutcome} reads it
 * and nothing else does. It reads the line exactly as the Python helper's `Outcome.parse`.
 */

/** The sidecar could not be started, is gone, or refused what was asked. */
export class SandguardError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SandguardError";
  }
}

/** One thing the reclaim after `bye` left behind. */
export interface Left {
  provider: string;
  /** The sandbox's id, or `*` for a provider that could not be listed. */
  id: string;
  reason: string;
}

/**
 * How the reclaim after `bye` went, as the sidecar said it (`close()` resolves to it).
 *
 * - `state`: `"clean"` (everything still owned is gone), `"left"` (see `left`), or
 *   `"unknown"`: the sidecar said nothing (it was gone already, `wait: null`, or the wait
 *   timed out); `detail` says which.
 * - `left`: what could not be removed, at most 16 named; `count` counts them all.
 */
export interface Outcome {
  state: "clean" | "left" | "unknown";
  clean: boolean;
  left: Left[];
  count: number;
  detail: string;
}

/** An outcome of `state` (`left` and `count` empty unless given). */
export function outcome(
  state: Outcome["state"],
  detail = "",
  left: Left[] = [],
  count = 0,
): Outcome {
  return { state, clean: state === "clean", left, count, detail };
}

/** The sidecar's outcome line; `null` when it is not one. */
export function parseOutcome(line: string): Outcome | null {
  const text = line.trim();
  if (text === "ended clean") return outcome("clean");
  const prefix = "ended left ";
  if (!text.startsWith(prefix)) return null;
  const rest = text.slice(prefix.length);
  const colon = rest.indexOf(":");
  if (colon < 0) return null;
  const count = rest.slice(0, colon);
  if (!/^[0-9]+$/.test(count)) return null;
  const left: Left[] = [];
  for (const raw of rest.slice(colon + 1).split(";")) {
    const item = raw.trim();
    if (!item) continue;
    const space = item.indexOf(" ");
    const who = space < 0 ? item : item.slice(0, space);
    const reason = space < 0 ? "" : item.slice(space + 1);
    const slash = who.indexOf("/");
    if (slash < 0) return null;
    left.push({ provider: who.slice(0, slash), id: who.slice(slash + 1), reason });
  }
  return outcome("left", "", left, Number(count));
}

/** The outcome as one line: `clean`, `left N: provider/id reason; ...`, `unknown (why)`. */
export function describe(o: Outcome): string {
  if (o.state === "left") {
    return `left ${o.count}: ${o.left.map((l) => `${l.provider}/${l.id} ${l.reason}`).join("; ")}`;
  }
  return o.state + (o.detail ? ` (${o.detail})` : "");
}

/**
 * The reclaim after `bye` left something behind (`guard({ strict: true })`). `.outcome` says
 * what; `sandguard sweep` retries.
 */
export class ReclaimIncomplete extends SandguardError {
  readonly outcome: Outcome;
  constructor(o: Outcome) {
    super(`the reclaim after bye left something behind: ${describe(o)}`);
    this.name = "ReclaimIncomplete";
    this.outcome = o;
  }
}
