//! The journal reader: any bytes a session journal may hold after a crash, a torn write or
//! tampering.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandguard::testing::ledger::fold_journal;

fuzz_target!(|data: &[u8]| {
    if let Some(view) = fold_journal("s1", data) {
        assert_eq!(view.id, "s1");
        assert!(view.corrupt_lines <= data.iter().filter(|&&b| b == b'\n').count());
    }
});
