//! The one integration-test binary: every test runs the real `sandguard` binary, against a
//! real Docker daemon where Docker is involved. See `tests/run.sh` for what must be running.

// Tests drive libc directly where a user's program would (pre_exec hooks, seccomp, sysconf).
#![allow(unsafe_code)]

mod support;

mod answers;
mod cli_edges;
mod cloud_proxy;
mod config_errors;
mod docker_context;
mod docker_ps_stop;
mod docker_sockets;
mod fleet;
mod guard;
mod image;
mod model_docker;
mod packaging;
mod plugins;
mod podman;
mod promises;
mod providers;
mod proxy;
mod readme;
mod reliability;
mod resume;
mod security;
mod sweep;
mod sweep_output;
mod trust;
mod trust_docker;
mod trust_ids;
mod trust_judgement;
mod trust_proxy;
mod trust_proxy_routes;
mod trust_sweep;
mod wrapper;
mod zero_code;
