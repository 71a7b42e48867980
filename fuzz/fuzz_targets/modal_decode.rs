//! Modal's gRPC answers (prost): the sandbox listing, the others the driver decodes, and the
//! retry policy in an error's `grpc-status-details-bin`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;
use sandguard::testing::providers::modal::{decode_list_page, wire};

fuzz_target!(|data: &[u8]| {
    let _ = decode_list_page(data);
    let _ = wire::SandboxTerminateResponse::decode(data)
        .map(|r| r.existing_result.map(|g| g.status_word()));
    let _ = wire::SandboxTagsGetResponse::decode(data);
    let _ = wire::ClientHelloResponse::decode(data);
    if let Some(wait) = wire::retry_after(data) {
        assert!(wait.as_secs_f64() <= 3600.0);
    }
});
