//! The Docker proxy's request heads: any bytes a client sends as a head. What parses must be
//! what the proxy promises to forward (a token method, a target without controls, a framing
//! it can follow), must route without panicking, and a rewritten head (a stamped create's)
//! must parse back to the same method, target and framing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandguard::testing::providers::docker::proxy::http::{Framing, Message};
use sandguard::testing::providers::docker::target;

fuzz_target!(|data: &[u8]| {
    let Ok(message) = Message::request(data) else {
        return;
    };
    let (method, target) = (message.method(), message.target());
    assert!(!method.is_empty() && !target.is_empty());
    assert!(!target.chars().any(|c| c.is_control() || c == ' '));
    let _ = target::route(method, target);
    let _ = message.framing(false);
    for replaced in [None, Some("/v1.41/commit?c=x")] {
        let head = message.rewritten(replaced, 7);
        let again = Message::request(&head).expect("a rewritten head parses");
        assert_eq!(again.method(), method);
        assert_eq!(again.target(), replaced.unwrap_or(target));
        assert_eq!(again.framing(false), Some(Framing::Length(7)));
        assert!(!again.expects_continue());
    }
});
