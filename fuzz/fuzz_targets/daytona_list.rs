//! Daytona's `GET /sandbox` answer (paged object or legacy array), as the driver reads it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandguard::testing::providers::daytona::parse_list_body;

fuzz_target!(|data: &[u8]| {
    if let Ok((sandboxes, _next)) = parse_list_body(data) {
        assert!(sandboxes.iter().all(|s| s.provider == "daytona"));
    }
});
