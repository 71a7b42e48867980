#!/usr/bin/env bash
# The tools the test layers build from crates.io (cargo-fuzz for fuzz/run.sh, mdbook for the
# book), pinned, and a cache of them per machine. Sourced by tests/run.sh and fuzz/run.sh.
#
# `cached_tool CRATE VERSION BINARY [FEATURES]` prints the path of BINARY: the one on PATH when
# there is one (a developer's own install wins, as before), else the one in the tool cache,
# $SANDGUARD_TOOL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/sandguard/tools), installed there
# with `cargo install --locked` when missing: with FEATURES only (no default features) when
# given, so that mdbook is built for `mdbook build` alone (its search index), not with the web
# server and file watcher of `mdbook serve`, which are most of its build. A cache entry is one
# directory per crate, version, features and rustc (`mdbook-0.4.52-search-rustc-1.95.0`),
# made whole or not at all (installed
# beside it, then renamed), so that every clone and every run on the machine reuses it and a
# new toolchain builds its own; a fresh machine builds it once, as a run always did. The
# cache is outside any checkout on purpose: CI starts from a clean clone, whose target
# directory holds nothing yet.
CARGO_FUZZ_VERSION=0.13.2
MDBOOK_VERSION=0.4.52

cached_tool() { # CRATE VERSION BINARY [FEATURES]
  local crate=$1 version=$2 binary=$3 features=${4:-} cache rustc dir args=()
  if command -v "$binary" >/dev/null 2>&1; then
    command -v "$binary"
    return 0
  fi
  cache=${SANDGUARD_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandguard/tools}
  rustc=$(rustc -V | awk '{ print $2 }')
  dir=$cache/$crate-$version${features:+-${features//,/-}}-rustc-$rustc
  [ -z "$features" ] || args=(--no-default-features --features "$features")
  if [ ! -x "$dir/bin/$binary" ]; then
    printf 'tools.sh: building %s %s from crates.io into %s (once on this machine)\n' \
      "$crate" "$version" "$dir" >&2
    rm -rf "$dir.partial"
    mkdir -p "$cache"
    cargo install --locked --quiet ${args[@]+"${args[@]}"} "$crate@$version" --root "$dir.partial" >&2
    rm -f "$dir.partial/.crates.toml" "$dir.partial/.crates2.json"
    mv "$dir.partial" "$dir"
  fi
  echo "$dir/bin/$binary"
}
