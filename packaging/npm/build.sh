#!/usr/bin/env bash
# Builds the npm packages: `packaging/npm/build.sh OUT BINARY [PLATFORM]`.
#
# - `sandguard-VERSION.tgz`: the TypeScript helper compiled to CommonJS (dist/*.js, with its
#   .d.ts types) and its ES module face (dist/index.mjs), made by `npm pack`;
# - `sandguard-PLATFORM-VERSION.tgz`: the platform package `@sandguard/PLATFORM` holding
#   BINARY as bin/sandguard (PLATFORM defaults to this machine's, e.g. linux-x64-gnu). PLATFORM
#   is OS-CPU[-LIBC] in npm's words (process.platform, process.arch): its package.json says
#   os [OS] and cpu [CPU], and libc [glibc or musl] only when LIBC is given, as on Linux;
#   darwin-arm64 and darwin-x64 have none (npm's libc field is Linux's).
# Both land in OUT. TypeScript (pinned) is installed from npm into OUT/tools once. The
# packages' version must be Cargo.toml's: a mismatch stops the build.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
binary=$2
platform=${3:-}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/../../Cargo.toml" | head -n 1)
node -e '
  const [pkg, version] = process.argv.slice(1);
  const p = require(pkg);
  const deps = Object.values(p.optionalDependencies || {});
  if (p.version !== version || deps.some((v) => v !== version)) {
    console.error(`packaging/npm: package.json says ${p.version} (platform packages ${deps}), Cargo.toml ${version}`);
    process.exit(1);
  }' "$here/sandguard/package.json" "$version"
if [ -z "$platform" ]; then
  platform=$(node -e '
    if (process.platform !== "linux") {
      console.log(`${process.platform}-${process.arch}`);
    } else {
      const gnu = process.report.getReport().header.glibcVersionRuntime ? "gnu" : "musl";
      console.log(`${process.platform}-${process.arch}-${gnu}`);
    }')
fi

tools=$out/tools
if [ ! -x "$tools/node_modules/.bin/tsc" ]; then
  mkdir -p "$tools"
  (cd "$tools" && npm install --no-audit --no-fund --silent --prefix . typescript@5.9 @types/node@20 >/dev/null)
fi

# The helper: sources copied next to the tools' node_modules, compiled, packed.
build=$out/build/sandguard
rm -rf "$build" && mkdir -p "$build"
cp -r "$here/sandguard/src" "$here/sandguard/package.json" "$here/sandguard/tsconfig.json" \
  "$here/sandguard/README.md" "$build/"
ln -s "$tools/node_modules" "$build/node_modules"
(cd "$build" && node_modules/.bin/tsc -p tsconfig.json)
cp "$here/sandguard/index.mjs" "$build/dist/index.mjs"
rm "$build/node_modules"
(cd "$build" && npm pack --silent --pack-destination "$out" >/dev/null)

# The platform package.
plat=$out/build/platform
rm -rf "$plat" && mkdir -p "$plat/bin"
IFS=- read -r os cpu libc <<<"$platform"
if [ -n "$libc" ]; then
  libc_field=(-e "s/\"LIBC\"/\"$(echo "$libc" | sed 's/gnu/glibc/')\"/")
else
  libc_field=(-e '/"libc":/d')
fi
sed -e "s/PLATFORM/$platform/g" -e "s/VERSION/$version/" -e "s/\"OS\"/\"$os\"/" -e "s/\"CPU\"/\"$cpu\"/" \
  "${libc_field[@]}" "$here/platform-package.json" >"$plat/package.json"
cp "$binary" "$plat/bin/sandguard"
chmod 755 "$plat/bin/sandguard"
(cd "$plat" && npm pack --silent --pack-destination "$out" >/dev/null)
ls "$out"/sandguard-*.tgz
