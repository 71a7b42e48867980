// The ES module face of the package: the CommonJS build's exports, named (one implementation,
// so a program that mixes `import` and `require` gets the same guards and the same registry).
import cjs from "./index.js";

export const {
  claim,
  describe,
  detach,
  findBinary,
  Guard,
  guard,
  LABEL_OWNER,
  LABEL_SESSION,
  ownerLabel,
  parseOutcome,
  parseReady,
  platformPackage,
  READY_TIMEOUT,
  ReclaimIncomplete,
  release,
  RENEW_EVERY,
  SandguardError,
  WAIT_TIMEOUT,
} = cjs;
export default cjs;
