//! `[notify]`: where the sweep and the sidecar send their events ([`crate::notify`]): a
//! command, a webhook, or both.
//!
//! Decisions:
//! - **No target, no notifier**: `[notify]` without `command` and without `webhook` sends
//!   nothing and builds nothing (as `[fleet]` without `store`), so the documented example can
//!   spell out every default with both targets commented out.
//! - **`command` is an argv**, `["prog", "arg", …]`, never a shell line: the event is written
//!   to its stdin as one JSON object and a newline, and stdin is closed.
//! - **`webhook` is `https://…`**; plain `http://` only to a loopback host (`127.0.0.0/8`,
//!   `::1`, `localhost`): a webhook URL carries its token (Slack, Discord), and it is not sent
//!   across a network in the clear. A local relay (and the tests' server) may use plain HTTP.
//! - **A webhook URL is a secret**: it is held as a [`Secret`] and shown only as its scheme and
//!   host ([`Webhook::display`]), in `Debug`, logs and errors; a URL that does not parse is
//!   refused by what is wrong with it, never echoed. It is also one of the secrets the
//!   payload's redaction hides ([`crate::notify`]).
//! - `timeout` (default 10 s) bounds each attempt, a command's run included (it is killed);
//!   a delivery is tried `attempts` times (default 4) with a doubling pause from
//!   `retry_initial` (default 1 s), so a webhook that hangs costs at most
//!   `attempts × timeout` plus the pauses (about 47 s with the defaults) of the notifier's own
//!   task, and never a moment of a reclaim.
//! - `detached_after` (unset: no `detached_alive` events): a detached sandbox that the sweep
//!   sees alive longer than this, by the provider's creation time, is told once.

use std::time::Duration;

use serde::Deserialize;

use super::values::{HumanDuration, Positive, Secret};

/// `[notify]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileNotify {
    pub(super) command: Option<super::file::PluginCommand>,
    pub(super) webhook: Option<Webhook>,
    pub(super) timeout: Option<Positive>,
    pub(super) attempts: Option<Attempts>,
    pub(super) retry_initial: Option<Positive>,
    pub(super) detached_after: Option<HumanDuration>,
}

/// `[notify]`, resolved: there is at least one target.
#[derive(Debug, Clone)]
pub struct NotifySettings {
    /// The program and its arguments, given each event on its stdin.
    pub command: Option<Vec<String>>,
    /// The URL each event is POSTed to.
    pub webhook: Option<Webhook>,
    /// How long one attempt (a POST, a run of the command) may take.
    pub timeout: Duration,
    /// Attempts per delivery, the first included (at least 1).
    pub attempts: u32,
    /// The pause before the second attempt; it doubles after each.
    pub retry_initial: Duration,
    /// A detached sandbox alive longer than this is told (`detached_alive`); `None`: never.
    pub detached_after: Option<Duration>,
}

/// The defaults: 10 s an attempt, 4 attempts, 1 s before the first retry.
pub(crate) const TIMEOUT: Duration = Duration::from_secs(10);
pub(crate) const ATTEMPTS: u32 = 4;
pub(crate) const RETRY_INITIAL: Duration = Duration::from_secs(1);

/// `[notify]` resolved: `None` when it names no target.
pub(super) fn notify(file: FileNotify) -> Option<NotifySettings> {
    if file.command.is_none() && file.webhook.is_none() {
        return None;
    }
    Some(NotifySettings {
        command: file.command.map(|c| c.0),
        webhook: file.webhook,
        timeout: file.timeout.map_or(TIMEOUT, |d| d.0),
        attempts: file.attempts.map_or(ATTEMPTS, |a| a.0),
        retry_initial: file.retry_initial.map_or(RETRY_INITIAL, |d| d.0),
        detached_after: file.detached_after.map(|d| d.0).filter(|d| !d.is_zero()),
    })
}

/// `attempts`: 1 to 20.
#[derive(Debug, Clone, Copy)]
pub(super) struct Attempts(u32);

impl<'de> Deserialize<'de> for Attempts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = u32::deserialize(d)?;
        if (1..=20).contains(&n) {
            Ok(Attempts(n))
        } else {
            Err(serde::de::Error::custom(format!(
                "must be from 1 to 20 attempts, not {n}"
            )))
        }
    }
}

/// A webhook URL, checked, and never shown whole.
#[derive(Clone, PartialEq, Eq)]
pub struct Webhook(Secret);

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

impl Webhook {
    /// `https://…`, or `http://…` to a loopback host; what is wrong with anything else, without
    /// echoing it.
    pub fn parse(text: &str) -> Result<Webhook, String> {
        let url = reqwest::Url::parse(text)
            .map_err(|e| format!("not a URL ({e}); expected https://host/…"))?;
        let host = url.host_str().unwrap_or_default();
        if host.is_empty() {
            return Err("names no host; expected https://host/…".into());
        }
        match url.scheme() {
            "https" => {}
            "http" if is_loopback(&url) => {}
            "http" => {
                return Err(format!(
                    "plain http to {host}: a webhook URL carries its token, so it must be \
                     https:// (plain http is allowed to a loopback host only)"
                ))
            }
            other => return Err(format!("scheme {other}: must be https://")),
        }
        Ok(Webhook(Secret::new(text)))
    }

    /// The whole URL, to send to.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// The URL as a secret, for the payload's redaction.
    pub fn secret(&self) -> &Secret {
        &self.0
    }

    /// What may be shown of it: `https://hooks.example.com/…` (scheme and host; port when
    /// given).
    pub fn display(&self) -> String {
        match reqwest::Url::parse(self.0.expose()) {
            Ok(url) => {
                let host = url.host_str().unwrap_or_default();
                match url.port() {
                    Some(port) => format!("{}://{host}:{port}/…", url.scheme()),
                    None => format!("{}://{host}/…", url.scheme()),
                }
            }
            Err(_) => "…".into(),
        }
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl<'de> Deserialize<'de> for Webhook {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Webhook::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_is_https_or_loopback_http_and_shows_its_host_only() {
        let hook = Webhook::parse("https://hooks.slack.com/services/T0/B0/SECRETTOKEN").unwrap();
        assert_eq!(hook.display(), "https://hooks.slack.com/…");
        assert!(!format!("{hook:?}").contains("SECRETTOKEN"));
        for ok in [
            "http://127.0.0.1:8080/hook",
            "http://localhost/x",
            "http://[::1]:9/x",
        ] {
            assert!(Webhook::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://hooks.example.com/T/SECRET",
            "ftp://x/SECRET",
            "SECRET",
            "https://:SECRET@/x",
        ] {
            let e = Webhook::parse(bad).unwrap_err();
            assert!(!e.contains("SECRET"), "{bad}: {e}");
        }
    }
}

#[cfg(test)]
mod file_tests {
    use crate::config::Settings;
    use std::path::Path;

    #[test]
    fn a_bad_notify_value_names_file_line_and_key_and_never_the_url() {
        let text =
            "[notify]\ncommand = [\"true\"]\nwebhook = \"http://hooks.example.com/T/SECRET\"\n";
        let e = Settings::parse_config_text(Path::new("n.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("n.toml:3: key `notify.webhook`"), "{e}");
        assert!(!e.contains("SECRET"), "{e}");
        let e = Settings::parse_config_text(Path::new("n.toml"), "[notify]\nwebhok = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("n.toml:2") && e.contains("notify.webhok"), "{e}");
    }

    #[test]
    fn notify_without_a_target_is_none_and_the_defaults_are_stated() {
        let s = Settings::parse_config_text(Path::new("n.toml"), "[notify]\ntimeout = \"3s\"\n")
            .unwrap();
        assert!(s.notify.is_none());
        let s = Settings::parse_config_text(
            Path::new("n.toml"),
            "[notify]\ncommand = [\"/bin/cat\"]\ndetached_after = \"1h\"\n",
        )
        .unwrap();
        let n = s.notify.unwrap();
        assert_eq!(n.command.as_deref(), Some(&["/bin/cat".to_string()][..]));
        assert_eq!(n.timeout, super::TIMEOUT);
        assert_eq!(n.attempts, super::ATTEMPTS);
        assert_eq!(n.detached_after, Some(std::time::Duration::from_secs(3600)));
    }
}
