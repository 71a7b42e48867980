#!/usr/bin/env bash
# The tools the test layers build from crates.io (cargo-fuzz for fuzz/run.sh, mdbook for the
# book), pinned, and a cache of them per machine. Sourced by tests/run.sh and fuzz/run.sh.
#
# `cached_tool CRATE VERSION BINARY` prints the path of BINARY: the one on PATH when there is
# one (a developer's own install wins, as before), else the one in the tool cache,
# $SANDGUARD_TOOL_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/sandguard/tools), installed there
# with `cargo install --locked` when missing. A cache entry is one directory per crate,
# version and rustc (`mdbook-0.4.52-rustc-1.91.1`), made whole or not at all (installed
# beside it, then renamed), so that every clone and every run on the machine reuses it and a
# new toolchain builds its own; a fresh machine builds it once, as a run always did. The
# cache is outside any checkout on purpose: CI starts from a clean clone, whose target
# directory holds nothing yet.
CARGO_FUZZ_VERSION=0.13.2
MDBOOK_VERSION=0.4.52

cached_tool() { # CRATE VERSION BINARY
  local crate=$1 version=$2 binary=$3 cache rustc dir
  if command -v "$binary" >/dev/null 2>&1; then
    command -v "$binary"
    return 0
  fi
  cache=${SANDGUARD_TOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sandguard/tools}
  rustc=$(rustc -V | awk '{ print $2 }')
  dir=$cache/$crate-$version-rustc-$rustc
  if [ ! -x "$dir/bin/$binary" ]; then
    printf 'tools.sh: building %s %s from crates.io into %s (once on this machine)\n' \
      "$crate" "$version" "$dir" >&2
    rm -rf "$dir.partial"
    mkdir -p "$cache"
    cargo install --locked --quiet "$crate@$version" --root "$dir.partial" >&2
    rm -f "$dir.partial/.crates.toml" "$dir.partial/.crates2.json"
    mv "$dir.partial" "$dir"
  fi
  echo "$dir/bin/$binary"
}
