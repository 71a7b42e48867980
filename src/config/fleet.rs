//! `[fleet]` and `[host]`: the fleet lease store ([`crate::fleet`]) and this machine's name in
//! it.
//!
//! Decisions:
//! - **The store is a URL**, `redis://[user[:password]@]host[:port][/db]` or `rediss://…` (TLS,
//!   rustls on the webpki roots, as every other client of sandguard). Valkey speaks the same
//!   protocol and is reached the same way.
//! - **Credentials may be in the URL or in the environment**: `SANDGUARD_FLEET_USER` and
//!   `SANDGUARD_FLEET_PASSWORD` win over the URL's (so a URL in a config file can stay free of
//!   secrets and a Kubernetes Secret supplies the password). They are kept as
//!   [`Secret`]s and handed to the client as connection fields, never spliced into a string.
//! - **A store URL is a secret too**: the whole URL is held as a [`Secret`]; every message
//!   shows [`FleetSettings::display`], the URL with its password replaced by `[redacted]` (the
//!   crate's one redaction of URLs, `crate::providers::redact::url`), and a malformed URL is
//!   reported by what is wrong with it, never by echoing it.
//! - `SANDGUARD_FLEET_STORE` beats `[fleet] store`; with neither, there is no fleet and no
//!   Redis code runs anywhere.
//! - `lease` is at least 1 s (renewals go every `lease / 3`); `prefix` is 1 to 64 characters
//!   from `[A-Za-z0-9._:-]`, so several teams can share one Redis without a key of theirs
//!   ever meaning something else.
//! - `[host] id` / `SANDGUARD_HOST_ID` names this machine in the store (shown by `sessions
//!   --fleet` and `ps`); by default the machine part of the owner identity (the first 16 hex
//!   digits of `/etc/machine-id`), or the hostname where a container has no machine id.
//!   Containers without a machine id and machines cloned from one image should set it.

use std::time::Duration;

use serde::Deserialize;

use super::values::{HumanDuration, Secret, ValueError};
use super::{ConfigError, Env};
use crate::providers::redact;

/// `[fleet]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileFleet {
    pub(super) store: Option<StoreUrl>,
    pub(super) lease: Option<Lease>,
    pub(super) prefix: Option<Prefix>,
}

/// `[host]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileHost {
    pub(super) id: Option<HostId>,
}

/// A store URL, checked, and never shown whole.
#[derive(Clone, PartialEq, Eq)]
pub struct StoreUrl(Secret);

impl std::fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact::url(self.0.expose()))
    }
}

impl StoreUrl {
    pub fn parse(text: &str) -> Result<StoreUrl, ValueError> {
        let url = reqwest::Url::parse(text).map_err(ValueError::NotAUrl)?;
        if !matches!(url.scheme(), "redis" | "rediss") {
            return Err(ValueError::NotRedis(url.scheme().to_string()));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(ValueError::NoHost);
        }
        let db = url.path().trim_start_matches('/');
        if !db.is_empty() && db.parse::<u32>().is_err() {
            return Err(ValueError::NotADatabase);
        }
        Ok(StoreUrl(Secret::new(text)))
    }

    pub fn expose(&self) -> &str {
        self.0.expose()
    }
}

impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        StoreUrl::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// `[fleet] lease`: at least [`MIN_LEASE`].
#[derive(Debug, Clone, Copy)]
pub(super) struct Lease(pub(super) Duration);

impl<'de> Deserialize<'de> for Lease {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let HumanDuration(d) = HumanDuration::deserialize(d)?;
        if d < MIN_LEASE {
            return Err(serde::de::Error::custom(
                "must be at least 1s (renewals go every lease / 3)",
            ));
        }
        Ok(Lease(d))
    }
}

#[derive(Debug, Clone)]
pub(super) struct Prefix(pub(super) String);

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        check_prefix(&s)
            .map(|()| Prefix(s))
            .map_err(serde::de::Error::custom)
    }
}

fn check_prefix(s: &str) -> Result<(), ValueError> {
    let ok = (1..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    if ok {
        Ok(())
    } else {
        Err(ValueError::Prefix)
    }
}

#[derive(Debug, Clone)]
pub(super) struct HostId(pub(super) String);

impl<'de> Deserialize<'de> for HostId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        check_host_id(&s)
            .map(|()| HostId(s))
            .map_err(serde::de::Error::custom)
    }
}

fn check_host_id(s: &str) -> Result<(), ValueError> {
    let ok = (1..=128).contains(&s.len()) && s.chars().all(|c| c.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(ValueError::HostId)
    }
}

/// The fleet store, when one is configured.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    pub store: StoreUrl,
    /// From `SANDGUARD_FLEET_USER`; wins over the URL's user.
    pub user: Option<Secret>,
    /// From `SANDGUARD_FLEET_PASSWORD`; wins over the URL's password.
    pub password: Option<Secret>,
    /// How long a session's lease lives without a renewal.
    pub lease: Duration,
    /// The first part of every key.
    pub prefix: String,
}

impl FleetSettings {
    /// The store URL as messages show it: its password masked.
    pub fn display(&self) -> String {
        redact::url(self.store.expose())
    }
}

/// This machine's name in the store; see the module docs for the default.
#[derive(Debug, Clone, Default)]
pub struct HostSettings {
    /// `None`: the default, computed when asked for ([`HostSettings::id`]).
    pub id: Option<String>,
}

impl HostSettings {
    pub fn id(&self) -> String {
        if let Some(id) = &self.id {
            return id.clone();
        }
        let machine = &crate::unix::Host::current().machine;
        if machine.chars().any(|c| c != '0') {
            return machine.clone();
        }
        crate::unix::hostname()
            .filter(|h| check_host_id(h).is_ok())
            .unwrap_or_else(|| machine.clone())
    }
}

const MIN_LEASE: Duration = Duration::from_secs(1);

/// `[fleet]` and its environment, resolved; `None` when no store is configured.
pub(super) fn fleet(file: FileFleet, env: &dyn Env) -> Result<Option<FleetSettings>, ConfigError> {
    let var = "SANDGUARD_FLEET_STORE";
    let store = match env.var(var) {
        Some(v) => Some(StoreUrl::parse(&v).map_err(|error| ConfigError::Env {
            var: var.into(),
            error,
        })?),
        None => file.store,
    };
    let lease = file.lease.map_or(Duration::from_secs(30), |d| d.0);
    Ok(store.map(|store| FleetSettings {
        store,
        user: env.var("SANDGUARD_FLEET_USER").map(Secret::new),
        password: env.var("SANDGUARD_FLEET_PASSWORD").map(Secret::new),
        lease,
        prefix: file.prefix.map_or_else(|| "sandguard".into(), |p| p.0),
    }))
}

/// `[host]` and `SANDGUARD_HOST_ID`, resolved.
pub(super) fn host(file: FileHost, env: &dyn Env) -> Result<HostSettings, ConfigError> {
    let var = "SANDGUARD_HOST_ID";
    match env.var(var) {
        Some(v) => check_host_id(&v)
            .map(|()| HostSettings { id: Some(v) })
            .map_err(|error| ConfigError::Env {
                var: var.into(),
                error,
            }),
        None => Ok(HostSettings {
            id: file.id.map(|h| h.0),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_never_shows() {
        let url = StoreUrl::parse("rediss://bob:hunter2@redis.example:6380/1").unwrap();
        let shown = format!("{url:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("bob:[redacted]@redis.example:6380"),
            "{shown}"
        );
        assert_eq!(redact::url("redis://:pw@h:1"), "redis://:[redacted]@h:1");
        assert_eq!(redact::url("redis://h:1"), "redis://h:1");
        assert_eq!(redact::url("redis://a:b@[bad"), "redis://…");
    }

    #[test]
    fn malformed_store_urls_are_refused_without_echoing_them() {
        for bad in [
            "localhost:6379",
            "http://h:1",
            "redis://",
            "redis://h:1/zero",
            "redis://u:s3cret@[::1",
        ] {
            let err = StoreUrl::parse(bad).unwrap_err().to_string();
            assert!(!err.contains("s3cret"), "{bad}: {err}");
        }
        assert!(StoreUrl::parse("redis://127.0.0.1:6379/0").is_ok());
        assert!(StoreUrl::parse("rediss://u:p@h").is_ok());
    }

    #[test]
    fn prefixes_and_host_ids_are_checked() {
        assert!(check_prefix("team-a:sg").is_ok());
        assert!(check_prefix("").is_err());
        assert!(check_prefix("a b").is_err());
        assert!(check_host_id("ci-runner-7").is_ok());
        assert!(check_host_id("two words").is_err());
        assert!(!HostSettings::default().id().is_empty());
    }
}
