//! The values the config file (and the environment) spell: human durations, durations that
//! must not be zero, the state directory's path, concurrency limits, log levels and secrets.
//! Each one is checked where it is read, so an error names the file, line and key.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::Env;

/// What is wrong with one value the file, the environment or a flag spelled. The words are
/// the user's: [`super::ConfigError`] puts the file and line, the variable or the flag before
/// them, and a value that might be a secret is never repeated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValueError {
    /// Not a duration sandguard reads (`5s`, `10m`, `1h30m`, …).
    #[error("invalid duration {0:?}: expected a number and a unit, such as 5s, 10m, 2h or 7d")]
    Duration(String),
    /// `0` where a duration must be longer.
    #[error("must be longer than 0")]
    Zero,
    /// A `spend` that is neither sandbox time nor an amount of money.
    #[error(
        "invalid spend {0:?}: expected sandbox time (20h, 90m) or money at the configured \
         prices ($5, $0.50)"
    )]
    Spend(String),
    /// `~user/…`: only the user's own home is expanded.
    #[error("`~user` is not supported: write the absolute path")]
    OtherHome,
    /// A relative path where an absolute one is needed.
    #[error("must be an absolute path (or start with ~/)")]
    Relative,
    /// `~` with no `HOME` to expand it with.
    #[error("starts with ~ but HOME is not set")]
    NoHome,
    /// Not a log level's name.
    #[error("unknown log level {0:?}: expected error, warn, info, debug or trace")]
    LogLevel(String),
    /// A fleet store URL that does not parse as a URL.
    #[error("not a URL ({0}): expected redis://host:port or rediss://…")]
    NotAUrl(<reqwest::Url as std::str::FromStr>::Err),
    /// A fleet store URL of another scheme.
    #[error("scheme {0:?} is not redis:// or rediss://")]
    NotRedis(String),
    /// A fleet store URL without a host.
    #[error("names no host: expected redis://host:port")]
    NoHost,
    /// A fleet store URL whose path is not a database number.
    #[error("the path must be a database number (redis://host:port/0)")]
    NotADatabase,
    /// `[fleet] prefix` out of its alphabet or length.
    #[error("must be 1 to 64 characters from A-Z a-z 0-9 . _ : -")]
    Prefix,
    /// `[host] id` / `SANDGUARD_HOST_ID` out of its alphabet or length.
    #[error("must be 1 to 128 printable characters without spaces")]
    HostId,
}

/// A duration written the human way: `500ms`, `5s`, `10m`, `2h`, `7d`, or a sum such as `1h30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HumanDuration(pub Duration);

impl std::str::FromStr for HumanDuration {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        parse_duration(s).map(HumanDuration)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(HumanDuration)
            .map_err(serde::de::Error::custom)
    }
}

/// A duration for which `0` makes no sense (a grace, a deadline, a timeout, a retry delay):
/// `0` is refused where it is read, naming the file, line and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Positive(pub Duration);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let HumanDuration(d) = HumanDuration::deserialize(d)?;
        positive(d).map(Positive).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for Positive {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        parse_duration(s).and_then(positive).map(Positive)
    }
}

/// A `spend` limit as written: sandbox time (`"20h"`) or money (`"$5"`), more than nothing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SpendValue(pub crate::budget::Spend);

impl std::str::FromStr for SpendValue {
    type Err = ValueError;
    fn from_str(s: &str) -> Result<Self, ValueError> {
        use crate::budget::Spend;
        let Some(amount) = s.trim().strip_prefix('$') else {
            let time = parse_duration(s).map_err(|_| ValueError::Spend(s.to_string()))?;
            return positive(time).map(|d| SpendValue(Spend::Time(d)));
        };
        match amount.trim().parse::<f64>() {
            Ok(a) if a.is_finite() && a > 0.0 => Ok(SpendValue(Spend::Cost(a))),
            _ => Err(ValueError::Spend(s.to_string())),
        }
    }
}

impl<'de> Deserialize<'de> for SpendValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

pub(super) fn positive(d: Duration) -> Result<Duration, ValueError> {
    if d.is_zero() {
        Err(ValueError::Zero)
    } else {
        Ok(d)
    }
}

/// `state_dir` as written: an absolute path, or one starting with `~/` (the home directory).
/// A relative path is refused: the sidecar runs from `/`, and the Docker proxy's socket path
/// (`DOCKER_HOST`) must not depend on the guarded program's working directory.
#[derive(Debug, Clone)]
pub(super) struct StatePath(pub(super) PathBuf);

impl<'de> Deserialize<'de> for StatePath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = PathBuf::deserialize(d)?;
        check_state_path(&raw)
            .map(|()| StatePath(raw))
            .map_err(serde::de::Error::custom)
    }
}

pub(super) fn check_state_path(p: &Path) -> Result<(), ValueError> {
    let text = p.to_string_lossy();
    if p.is_absolute() || text == "~" || text.starts_with("~/") {
        Ok(())
    } else if text.starts_with('~') {
        Err(ValueError::OtherHome)
    } else {
        Err(ValueError::Relative)
    }
}

/// `~` and `~/…` expanded with `$HOME`.
pub(super) fn expand_home(p: &Path, env: &dyn Env) -> Result<PathBuf, ValueError> {
    let text = p.to_string_lossy();
    let rest = match text.strip_prefix('~') {
        None => return Ok(p.to_path_buf()),
        Some(rest) => rest.trim_start_matches('/'),
    };
    let home = env.var("HOME").ok_or(ValueError::NoHome)?;
    Ok(Path::new(&home).join(rest))
}

/// Parses `5s`, `10m`, `2h`, `7d`, `250ms`, `1h30m`, or `0`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    let bad = || ValueError::Duration(text.to_string());
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ms" => Duration::from_millis(1),
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            "d" => Duration::from_secs(86_400),
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let part = unit
            .checked_mul(u32::try_from(n).map_err(|_| bad())?)
            .ok_or_else(bad)?;
        total = total.checked_add(part).ok_or_else(bad)?;
    }
    Ok(total)
}

/// A concurrency limit: an integer from 1 to 1024.
#[derive(Debug, Clone, Copy)]
pub(super) struct Concurrency(pub(super) usize);

impl<'de> Deserialize<'de> for Concurrency {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        if (1..=1024).contains(&n) {
            Ok(Concurrency(n as usize))
        } else {
            Err(serde::de::Error::custom(format!(
                "must be between 1 and 1024, not {n}"
            )))
        }
    }
}

/// A log level name.
#[derive(Debug, Clone, Copy)]
pub(super) struct LogLevel(pub(super) tracing::Level);

impl<'de> Deserialize<'de> for LogLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_level(&s)
            .map(LogLevel)
            .map_err(serde::de::Error::custom)
    }
}

pub(super) fn parse_level(s: &str) -> Result<tracing::Level, ValueError> {
    s.parse::<tracing::Level>()
        .map_err(|_| ValueError::LogLevel(s.to_string()))
}

/// A secret read from the environment or the config file. It never prints itself: `Debug`
/// and `Display` show `[redacted]`, so a secret cannot reach a log line or an error by
/// accident; [`Secret::expose`] is the one deliberate way to read it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// A rate cap: calls a second, a positive number (`rate = 20`, `rate = 2.5`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rate(pub f64);

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = f64::deserialize(d)?;
        if n.is_finite() && n > 0.0 {
            Ok(Rate(n))
        } else {
            Err(serde::de::Error::custom(format!(
                "must be a number of calls a second above 0, not {n}"
            )))
        }
    }
}

/// A price per sandbox-hour: a number, 0 or more (`price_per_hour = 0.05`; see
/// `crate::ledger::price`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Price(pub f64);

impl<'de> Deserialize<'de> for Price {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = f64::deserialize(d)?;
        if n.is_finite() && n >= 0.0 {
            Ok(Price(n))
        } else {
            Err(serde::de::Error::custom(format!(
                "must be a price per sandbox-hour, a number 0 or more, not {n}"
            )))
        }
    }
}
