//! Tenki's `ListWorkspaceSandboxes` answer (Connect JSON), as the driver reads it, for an
//! unfiltered listing and for one that asked for a session.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandguard::testing::providers::tenki::parse_list_body;

fuzz_target!(|data: &[u8]| {
    let _ = parse_list_body(data, None);
    let _ = parse_list_body(data, Some("0123456789abcdefghijklmnopqrstuvwxyz"));
});
