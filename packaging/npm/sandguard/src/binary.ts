/**
 * Finding the `sandguard` executable: {@link findBinary}.
 *
 * The order, as esbuild and Biome find theirs (and as the Python helper finds the wheel's):
 * 1. `$SANDGUARD_BIN`: an explicit choice beats anything installed (esbuild's
 *    `ESBUILD_BINARY_PATH` and Biome's `BIOME_BINARY` come first there too);
 * 2. the platform package npm installed from this package's `optionalDependencies`:
 *    `@sandguard/linux-x64-gnu`, `…-arm64-gnu`, `…-x64-musl`, `…-arm64-musl`,
 *    `@sandguard/darwin-arm64`, `darwin-x64`, each holding `bin/sandguard` (npm installs only
 *    the one whose `os`, `cpu` and `libc` match; macOS has one C library, so no `libc`);
 * 3. `sandguard` on `PATH`.
 * None there is a {@link SandguardError} naming all three. `guard({ binary })` overrides all.
 */

import { accessSync, constants, statSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { SandguardError } from "./errors";

let libcOfThisNode: "gnu" | "musl" | undefined;

/**
 * `gnu` or `musl`: the C library this Node runs on (Node's report has a glibc version only on
 * glibc). Computed once: a report is not free (without `excludeNetwork` it resolves the
 * names of every open socket).
 */
function libc(): "gnu" | "musl" {
  if (libcOfThisNode === undefined) {
    try {
      const report = (process as unknown as { report?: { excludeNetwork?: boolean; getReport(): unknown } }).report;
      // The program's own setting is put back: only this one report skips the network.
      const was = report?.excludeNetwork;
      if (report && was !== undefined) report.excludeNetwork = true;
      let header: { glibcVersionRuntime?: string } | undefined;
      try {
        header = (report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
      } finally {
        if (report && was !== undefined) report.excludeNetwork = was;
      }
      libcOfThisNode = header?.glibcVersionRuntime ? "gnu" : "musl";
    } catch {
      libcOfThisNode = "gnu";
    }
  }
  return libcOfThisNode;
}

/**
 * The platform package for this machine, e.g. `@sandguard/linux-x64-gnu` or
 * `@sandguard/darwin-arm64`; `null` where none is built.
 */
export function platformPackage(): string | null {
  if (process.arch !== "x64" && process.arch !== "arm64") return null;
  if (process.platform === "linux") return `@sandguard/linux-${process.arch}-${libc()}`;
  if (process.platform === "darwin") return `@sandguard/darwin-${process.arch}`;
  return null;
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function fromPlatformPackage(): string | null {
  const name = platformPackage();
  if (name === null) return null;
  try {
    const manifest = require.resolve(`${name}/package.json`);
    const path = join(dirname(manifest), "bin", "sandguard");
    return executable(path) ? path : null;
  } catch {
    return null;
  }
}

function onPath(): string | null {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir) continue;
    const path = join(dir, "sandguard");
    if (executable(path)) return path;
  }
  return null;
}

/**
 * The `sandguard` executable: `$SANDGUARD_BIN`, else the platform package's, else the one on
 * `PATH`. Use it to run the CLI (`sandguard ps`, `sandguard claim` in a child).
 */
export function findBinary(): string {
  const env = process.env.SANDGUARD_BIN;
  if (env) return env;
  const found = fromPlatformPackage() ?? onPath();
  if (found !== null) return found;
  const name = platformPackage();
  const pkg =
    name === null
      ? `no platform package exists for ${process.platform}-${process.arch} (sandguard runs on Linux and macOS, x64 and arm64)`
      : `the platform package ${name} is not installed (npm skips optionalDependencies with --no-optional or --omit=optional)`;
  throw new SandguardError(
    `cannot find the sandguard binary: ${pkg}; SANDGUARD_BIN is not set; and no sandguard is on PATH`,
  );
}
