//! Unit tests of the store's pieces that need no server: targets in sets, that a
//! `rediss://` client can be built and tries a TLS handshake on the crate's rustls stack, and
//! how a store that cannot be reached is named.

use super::*;
use crate::config::fleet::StoreUrl;
use crate::config::FleetSettings;

fn settings(url: &str) -> FleetSettings {
    FleetSettings {
        store: StoreUrl::parse(url).unwrap(),
        user: None,
        password: None,
        lease: Duration::from_secs(3),
        prefix: "t".into(),
    }
}

#[test]
fn targets_round_trip_through_set_members() {
    let t = Target {
        provider: "docker".into(),
        id: "net:with:colons".into(),
    };
    assert_eq!(decode_target(&encode_target(&t)), Some(t));
    assert_eq!(decode_target("nocolon"), None);
    assert_eq!(decode_target(":x"), None);
}

/// rustls needs a CryptoProvider: ring is the one the crate's TLS stack selects, and a
/// `rediss://` connection must reach the handshake (and fail on a server that speaks no TLS)
/// instead of panicking for want of a provider.
#[tokio::test]
async fn a_rediss_client_builds_on_the_crates_rustls_stack() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        // Accept and hang up: a TLS client sees the connection close mid-handshake.
        while let Ok((socket, _)) = listener.accept().await {
            drop(socket);
        }
    });
    let url = format!("rediss://u:hunter2@127.0.0.1:{port}/0");
    let store = redis::RedisStore::new(&settings(&url)).unwrap();
    let err = store.sessions().await.unwrap_err().to_string();
    server.abort();
    assert!(!err.contains("hunter2"), "{err}");
    assert!(err.contains("u:[redacted]@127.0.0.1"), "{err}");
    assert!(!err.to_lowercase().contains("crypto provider"), "{err}");
}

/// Issue 23: a host no resolver finds is named, not called a lost connection. (`.invalid`
/// never resolves, RFC 6761, with or without a network.)
#[tokio::test]
async fn a_store_host_that_cannot_be_resolved_is_named() {
    let store = redis::RedisStore::new(&settings("redis://no-such-host.invalid:6379")).unwrap();
    let err = store.sessions().await.unwrap_err().to_string();
    assert!(
        err.contains("cannot resolve the fleet store host no-such-host.invalid ("),
        "{err}"
    );
    assert!(!err.contains("connection lost"), "{err}");
}

/// And a host that resolves but refuses is not taken for one that does not.
#[tokio::test]
async fn a_refused_connection_is_not_taken_for_a_failed_lookup() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = redis::RedisStore::new(&settings(&format!("redis://localhost:{port}"))).unwrap();
    let err = store.sessions().await.unwrap_err().to_string();
    assert!(err.ends_with(": connection refused"), "{err}");
}

/// The store's `state` words are the ledger's five and `stopped`, as before `FleetState` was
/// made of a `SessionState`: the wire format is unchanged.
#[test]
fn fleet_states_keep_their_words_on_the_wire() {
    use crate::ledger::SessionState;
    let words = [
        "active",
        "reclaiming",
        "pending",
        "stopped",
        "reclaimed",
        "clean",
    ];
    for word in words {
        let state = FleetState::parse(word).unwrap();
        assert_eq!(state.as_str(), word);
        assert_eq!(serde_json::to_value(state).unwrap(), word);
        assert_eq!(state.is_final(), word == "reclaimed" || word == "clean");
    }
    assert_eq!(FleetState::parse("gone"), None);
    assert_eq!(FleetState::from(SessionState::Pending).as_str(), "pending");
    assert!(FleetState::Stopped != SessionState::Active);
}
