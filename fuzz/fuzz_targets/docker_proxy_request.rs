//! The Docker proxy's judgement of what a client sends, now that hyper parses the HTTP: any
//! request target (the input's first line) and any create or commit body (the rest). The
//! route must not panic. A create body is refused or comes out stamped: read back as Go
//! reads it, its one label map carries each of the session's labels with the session's value,
//! and its named volumes can be read. A commit body that is rewritten comes out with no
//! `sandguard.*` label.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use sandguard::testing::proxy::Json;
use sandguard::testing::proxy::docker::{
    commit_target, named_volumes, route, scrub_commit, stamp,
};
use sandguard::testing::proxy::stamp::{take, Keys};

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == b'\n').unwrap_or(data.len());
    let body = data.get(split + 1..).unwrap_or_default();
    if let Ok(target) = std::str::from_utf8(&data[..split]) {
        let _ = route("POST", target);
        let _ = commit_target(target);
    }
    let labels = BTreeMap::from([
        ("sandguard.session".to_string(), "s1".to_string()),
        ("sandguard.owner".to_string(), "o1".to_string()),
    ]);
    if let Ok((stamped, _)) = stamp(body, &labels) {
        let Ok(Json::Object(mut pairs)) = Json::parse(&stamped.to_vec()) else {
            panic!("a stamped body reads back as an object");
        };
        let merged = take(&mut pairs, Keys::Go("Labels"))
            .expect("its labels read back")
            .expect("it has labels");
        for (k, v) in &labels {
            let last = merged.iter().rev().find(|(key, _)| key == k);
            assert_eq!(last.map(|(_, v)| v), Some(&Json::str(v)), "{k}");
        }
        let _ = named_volumes(&stamped);
    }
    if let Ok(scrubbed) = scrub_commit(body) {
        if let Ok(Json::Object(mut pairs)) = Json::parse(&scrubbed) {
            if let Ok(Some(merged)) = take(&mut pairs, Keys::Go("Labels")) {
                let sandguard = |k: &str| k.to_ascii_lowercase().starts_with("sandguard.");
                assert!(!merged.iter().any(|(k, _)| sandguard(k)), "{merged:?}");
            }
        }
    }
});
