//! A throwaway `redis-server` for the fleet benches: a free loopback port, a password, no
//! persistence. tests/run.sh installs the server.

use std::process::{Child, Command, Stdio};

/// Starts one with `password` and `extra` arguments; returns the process and its port.
pub fn start(password: &str, extra: &[&str]) -> (Child, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--requirepass",
            password,
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server (tests/run.sh installs it)");
    (child, port)
}
