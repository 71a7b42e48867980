//! A session: one guarded owner. [`spawn`] starts its sidecar (for the wrapper and every SDK
//! helper) and [`guard`] is the Rust SDK helper built on it.
//!
//! A session: Its id is 128 random bits written as 32 lower-case hex
//! digits (safe as a file name, a label value and a tag on every provider), and its labels are
//! what the owner stamps on every sandbox it creates.

pub mod guard;
pub mod spawn;

use std::collections::BTreeMap;

use crate::identity::Identity;
use crate::labels;

/// A new random session id: 128 bits from the kernel.
pub fn new_id() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    crate::unix::random_bytes(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Whether `id` is acceptable as a session id: 1 to 64 characters of `[0-9a-z]`. Ids
/// given by users or SDKs (`watch --session`) are checked, as they become file names.
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
}

/// The labels every sandbox of the session carries.
pub fn labels(session: &str, owner: &Identity) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::SESSION.to_string(), session.to_string()),
        (labels::OWNER.to_string(), owner.to_label()),
    ])
}

/// The labels as `SANDGUARD_LABELS` carries them: `k=v,k=v`.
pub fn labels_env(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_long_random_and_valid() {
        let (a, b) = (new_id().unwrap(), new_id().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(valid_id(&a));
        for bad in ["", "ABC", "a/b", "../x", &"a".repeat(65)] {
            assert!(!valid_id(bad), "{bad}");
        }
    }

    #[test]
    fn labels_are_written_k_equals_v() {
        let id = Identity {
            machine: "0123456789abcdef".into(),
            boot: "0123456789abcdef".into(),
            pid: 1,
            start_time: 2,
            pidns: Some(3),
        };
        let l = labels("s1", &id);
        assert_eq!(
            labels_env(&l),
            "sandguard.owner=0123456789abcdef-0123456789abcdef-1-2-3,sandguard.session=s1"
        );
    }
}
