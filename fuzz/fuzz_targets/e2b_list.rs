//! E2B's `GET /v2/sandboxes` answer, as the driver reads it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandguard::testing::providers::e2b::parse_list_body;

fuzz_target!(|data: &[u8]| {
    if let Ok(sandboxes) = parse_list_body(data) {
        assert!(sandboxes.iter().all(|s| s.provider == "e2b"));
    }
});
