//! Fly.io's machine listing, and the lease-conflict message and `GET …/lease` body a removal
//! reads when a lease blocks it. The input's first line is the error message, the rest the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandguard::testing::providers::flyio::{lease_wait, parse_list_body};

fuzz_target!(|data: &[u8]| {
    let _ = parse_list_body(data, "my-app");
    let (message, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let _ = lease_wait(&String::from_utf8_lossy(message), body);
});
