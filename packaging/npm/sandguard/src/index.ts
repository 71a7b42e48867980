/**
 * sandguard for Node: start a sidecar that reclaims every sandbox this process created when
 * it ends, however it ends. See README.md's "Node" section.
 */

export { findBinary, platformPackage } from "./binary";
export { describe, type Left, type Outcome, parseOutcome, ReclaimIncomplete, SandguardError } from "./errors";
export {
  claim,
  detach,
  Guard,
  guard,
  type GuardOptions,
  parseReady,
  READY_TIMEOUT,
  release,
  RENEW_EVERY,
  WAIT_TIMEOUT,
} from "./guard";
export { LABEL_OWNER, LABEL_SESSION, ownerLabel } from "./identity";
