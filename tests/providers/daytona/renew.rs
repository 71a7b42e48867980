//! The driver's renewal against the emulator, through the library: what it reads, what it
//! sets, and what it never touches. (The keeper driving it through the real binary is in
//! `daytona.rs`.)

use std::time::Duration;

use super::super::session_id;
use super::KEY;
use crate::support::daytona::Daytona;
use crate::support::eventually;
use sandguard::labels::{Selector, SESSION};
use sandguard::testing::config::Secret;
use sandguard::testing::providers::daytona::{Auth, DaytonaProvider};
use sandguard::testing::providers::{Provider, ProviderError};

/// The driver reads `autoDestroyAt` first and sets the TTL only when it falls short of what
/// is asked, so a renewal never shortens a TTL; it never touches auto-stop or auto-delete;
/// a sandbox on its way out, or gone, is gone to it.
#[test]
fn renew_sets_the_ttl_only_when_short_and_never_auto_delete() {
    let emu = Daytona::start(KEY);
    let session = session_id();
    let bare = emu.insert_without_ttl(&[(SESSION, &session)]);
    let long = emu.insert(&[(SESSION, &session)]);
    let long_ttl = emu.auto_destroy_ms(&long).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let key = Secret::new(KEY);
        let p = DaytonaProvider::new(Auth::ApiKey(&key), &emu.api_url(), Duration::from_secs(5))
            .unwrap();
        let mut listed = p.list(&Selector::session(&session)).await.unwrap();
        listed.sort_by_key(|s| s.id != bare);
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].expires_at, None, "no TTL yet");
        assert_eq!(listed[1].expires_at, Some(long_ttl / 1000));
        for s in &listed {
            p.renew(s, Duration::from_secs(90)).await.unwrap();
        }
        let set = emu.auto_destroy_ms(&bare).unwrap();
        let now = emu.clock_ms();
        assert!(
            (now + 90_000..=now + 120_000).contains(&set),
            "{set} vs {now}"
        );
        assert_eq!(
            emu.auto_destroy_ms(&long),
            Some(long_ttl),
            "never shortened"
        );
        // Renewed again at once: already long enough.
        p.renew(&listed[0], Duration::from_secs(90)).await.unwrap();
        assert_eq!(emu.intervals(&bare), Some((15, -1)));
        assert_eq!(emu.intervals(&long), Some((15, -1)));

        p.remove(&listed[0]).await.unwrap();
        assert!(matches!(
            p.renew(&listed[0], Duration::from_secs(90)).await,
            Err(ProviderError::Gone(_))
        ));
        eventually(Duration::from_secs(3), "the deletion completes", || {
            emu.state_of(&bare).is_none()
        });
        assert!(matches!(
            p.renew(&listed[0], Duration::from_secs(60)).await,
            Err(ProviderError::Gone(_))
        ));
    });
    let posts: Vec<String> = emu
        .hits()
        .into_iter()
        .filter(|h| h.method == "POST")
        .map(|h| format!("{} {}", h.status, h.path))
        .collect();
    assert_eq!(posts, [format!("200 /api/sandbox/{bare}/ttl/2")]);
}

/// A server without the `/ttl` route (built from the public source) answers it 404, right
/// after the sandbox was read: that is an error saying so, never "gone".
#[test]
fn a_server_without_the_ttl_route_is_an_error_not_a_gone_sandbox() {
    let emu = Daytona::start(KEY);
    emu.set_no_ttl_route(true);
    let session = session_id();
    emu.insert_without_ttl(&[(SESSION, &session)]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let key = Secret::new(KEY);
        let p = DaytonaProvider::new(Auth::ApiKey(&key), &emu.api_url(), Duration::from_secs(5))
            .unwrap();
        let listed = p.list(&Selector::session(&session)).await.unwrap();
        p.renew(&listed[0], Duration::from_secs(60)).await
    });
    match result {
        Err(ProviderError::Fatal(d)) => {
            assert_eq!(d.status, Some(404));
            assert!(d.message.contains("no sandbox TTL route"), "{d}");
        }
        other => panic!("expected a fatal error, got {other:?}"),
    }
}
