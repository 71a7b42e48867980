//! The one integration-test binary: every test runs the real `sandguard` binary, against a
//! real Docker daemon where Docker is involved. See `tests/run.sh` for what must be running.
//!
//! Tests are filed by subsystem, one folder each; `support/` holds the helpers they share
//! (the isolated binary, the Docker helpers, the provider emulators).

// Tests drive libc directly where a user's program would (pre_exec hooks, seccomp, sysconf).
#![allow(unsafe_code)]

mod support;

pub(crate) mod cli;
mod fleet;
mod notify;
pub(crate) mod providers;
pub(crate) mod proxy;
mod reclaim;
mod sweep;
pub(crate) mod watch;
