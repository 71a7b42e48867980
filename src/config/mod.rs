//! Configuration: the config file, the environment and the command-line flags, resolved once
//! into a plain [`Settings`] that the rest of the library reads.
//!
//! Lookup order for the file (the first that is given or exists wins; files are not merged):
//! `--config FILE`, `$SANDGUARD_CONFIG`, `$XDG_CONFIG_HOME/sandguard/config.toml` (with
//! `~/.config` standing in for an unset `XDG_CONFIG_HOME`, as the XDG spec says),
//! `/etc/sandguard/config.toml`. A file named by `--config` or `$SANDGUARD_CONFIG` must exist;
//! the others are optional.
//!
//! Precedence for each value: flags beat the environment, the environment beats the file, the
//! file beats the built-in defaults. The documented example with every key and its default is
//! `config/sandguard.toml`.
//!
//! Errors name the file, the line and the key (`sandguard.toml:7: key `reclaim.deadline`: …`)
//! and never echo a value that might be a secret.

use std::path::PathBuf;
use std::time::Duration;

pub(crate) mod cloud;
pub(crate) mod docker;
pub(crate) mod dotenv;
mod file;
pub(crate) mod fleet;
pub(crate) mod notify;
mod resolve;
mod values;

pub use cloud::CloudSettings;
pub(crate) use docker::DockerHost;
pub use fleet::FleetSettings;
pub(crate) use fleet::HostSettings;
pub use notify::{NotifySettings, Webhook};
pub use values::Secret;
pub(crate) use values::ValueError;
pub(crate) use values::{parse_duration, HumanDuration, Positive, Rate, SpendValue};

/// Everything sandguard reads from configuration, after file, environment and flags.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The file the settings came from, if any.
    pub source: Option<PathBuf>,
    /// The ledger's state directory.
    pub state_dir: PathBuf,
    /// The log level for diagnostics on stderr.
    pub log_level: tracing::Level,
    pub watch: WatchSettings,
    pub reclaim: ReclaimSettings,
    pub sweep: SweepSettings,
    pub docker: DockerSettings,
    pub e2b: CloudSettings,
    pub daytona: CloudSettings,
    pub flyio: CloudSettings,
    pub tenki: CloudSettings,
    pub modal: CloudSettings,
    /// Modal's environment (`MODAL_ENVIRONMENT`, `[providers.modal] environment`); `None`:
    /// the account's default one.
    pub modal_environment: Option<String>,
    /// `[providers.NAME]` tables for plugin providers (any name that is not a built-in).
    pub plugins: Vec<PluginSettings>,
    /// The fleet lease store; `None` (no `[fleet] store`, no `SANDGUARD_FLEET_STORE`): none.
    pub fleet: Option<FleetSettings>,
    /// This machine's name in the fleet store.
    pub host: HostSettings,
    /// `[providers.NAME] price_per_hour` and `[providers.NAME.prices]`: what sandbox time is
    /// estimated to cost ([`crate::ledger::price`]).
    pub prices: crate::ledger::price::Prices,
    /// `[limits]`, and the flags over it: each session's limits on what it creates through the
    /// proxies ([`crate::budget`]).
    pub limits: crate::budget::Limits,
    /// `[providers.NAME.limits]`: limits on one provider's sandboxes alone, beside the
    /// session's.
    pub provider_limits: std::collections::BTreeMap<String, crate::budget::Limits>,
    /// `[notify]`: where events go ([`crate::notify`]); `None` when it names no target.
    pub notify: Option<NotifySettings>,
}

/// The names of the built-in providers: their `[providers.NAME]` tables are theirs, and no
/// plugin may take their names.
pub(crate) const BUILT_IN_PROVIDERS: [&str; 6] =
    ["docker", "e2b", "daytona", "flyio", "tenki", "modal"];

/// A plugin provider as the config file describes it (`[providers.NAME]`).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginSettings {
    pub name: String,
    /// The program and its leading arguments; `None`: `sandguard-provider-NAME` on `PATH`.
    pub command: Option<Vec<String>>,
    /// How long one call may take before the plugin is killed.
    pub timeout: Duration,
    /// Calls a second never to exceed during a reclaim (`rate`), if set.
    pub rate: Option<f64>,
}

/// The sidecar's lease.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// How long an owner that sends heartbeats may go silent before its lease expires.
    pub grace: Duration,
    /// How often the sidecar renews its sandboxes' server-side TTLs (`0` never does).
    pub renew_every: Duration,
    /// Serve a labelling Docker API proxy to the program `sandguard -- CMD` runs
    /// (`docker_proxy`): [`ProxyMode::Auto`] unless the file says `true` or `false`.
    pub docker_proxy: ProxyMode,
    /// Serve the cloud API proxy (E2B, Daytona) to that program (`cloud_proxy`), likewise.
    pub cloud_proxy: ProxyMode,
    /// What a program served the Docker proxy gets for Testcontainers' Ryuk ([`Ryuk`]).
    pub ryuk: Ryuk,
}

/// Testcontainers' own reaper, Ryuk, beside the Docker proxy.
///
/// Decisions:
/// - **Off by default where the proxy is served**: the program gets
///   `TESTCONTAINERS_RYUK_DISABLED=true` with `DOCKER_HOST`. Ryuk is a container that
///   testcontainers (Python, Node, Java, Go) starts first, from an image that cannot be pulled
///   offline or in an air-gapped CI, with the Docker socket mounted into it (privileged under
///   SELinux, unreachable on many rootless engines); through the proxy everything
///   testcontainers makes is labelled and reclaimed the moment the program dies, so Ryuk adds
///   a pull and a 10 s reaping delay and nothing else.
/// - **The user's word wins**: `TESTCONTAINERS_RYUK_DISABLED` already set (to anything) in
///   sandguard's environment, which is the program's, is left as it is
///   ([`Ryuk::UsersOwn`]); `keep_ryuk = true` under `[watch]` never sets it
///   ([`Ryuk::Kept`]), for those who want both reapers.
/// - Nothing is set when the Docker proxy is not served: without it sandguard reclaims only
///   what carries the labels or was claimed, and Ryuk is what reaps the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ryuk {
    /// The program gets `TESTCONTAINERS_RYUK_DISABLED=true` with the Docker proxy.
    Disabled,
    /// `keep_ryuk = true`.
    Kept,
    /// `TESTCONTAINERS_RYUK_DISABLED` was set already.
    UsersOwn,
}

/// The variable testcontainers reads to skip starting Ryuk.
pub(crate) const RYUK_DISABLED: &str = "TESTCONTAINERS_RYUK_DISABLED";

/// Whether the wrapper serves a proxy to the program it runs.
///
/// Decisions (zero code by default):
/// - **Auto is the default** for `sandguard -- CMD` and `sandguard run`: the Docker proxy is
///   served when a Docker daemon is configured and accepts a connection, the cloud proxy for
///   each of E2B and Daytona whose credentials are found where their SDKs look. When that is
///   impossible the program still runs, guarded by labels and claims, and one warning line on
///   the wrapper's stderr says why.
/// - **On** (`--docker-proxy`, `docker_proxy = true`) was asked for: impossible is an error
///   (the wrapper exits 125 and CMD does not run).
/// - **Off** (`--no-docker-proxy`, `docker_proxy = false`) serves nothing.
/// - `sandguard watch` (the SDKs' sidecar) serves a proxy only when asked
///   (`--docker-proxy[=auto]`): a helper that starts it knows what it wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ProxyMode {
    Off,
    #[default]
    Auto,
    On,
}

impl ProxyMode {
    /// The config file's `true`, `false` or `"auto"`, or the default (auto).
    fn from_file(value: Option<ProxyMode>) -> ProxyMode {
        value.unwrap_or_default()
    }
}

/// In the config file: `true` (on), `false` (off) or `"auto"`; anything else is an error that
/// names the file, line and key, as every bad value is.
impl<'de> serde::Deserialize<'de> for ProxyMode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ProxyMode, D::Error> {
        struct Mode;
        impl serde::de::Visitor<'_> for Mode {
            type Value = ProxyMode;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("true, false or \"auto\"")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ProxyMode, E> {
                Ok(if v { ProxyMode::On } else { ProxyMode::Off })
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ProxyMode, E> {
                match v {
                    "auto" => Ok(ProxyMode::Auto),
                    other => Err(E::invalid_value(serde::de::Unexpected::Str(other), &self)),
                }
            }
        }
        d.deserialize_any(Mode)
    }
}

/// The sweep's housekeeping.
#[derive(Debug, Clone)]
pub struct SweepSettings {
    /// Final sessions (reclaimed, clean) whose journal has not changed for this long are
    /// deleted from the ledger by every sweep; `None` (`"0"` in the file) keeps them forever.
    pub prune_after: Option<Duration>,
}

/// Docker's window of removals in flight when `[reclaim] concurrency` is not set: the Docker
/// CLI's own (`docker rm` removes 50 at once).
pub(crate) const DOCKER_WINDOW: usize = 50;

/// The reclaim path's limits.
#[derive(Debug, Clone)]
pub struct ReclaimSettings {
    /// Removals in flight at once, per provider (`[reclaim] concurrency`, default 16).
    pub concurrency: usize,
    /// Removals in flight for the providers whose window is not `concurrency`: Docker's is
    /// [`DOCKER_WINDOW`] while `[reclaim] concurrency` is not set. A local daemon has no rate
    /// limit to be polite to, and dockerd overlaps one removal's waits (the kill, the shim's
    /// exit) with another's work: at 100 and 200 running containers a window of 50 reclaimed
    /// faster than 16 (`cargo bench --bench suite`, README "Performance"), while 200 at once
    /// was slower than either (dockerd then contends with itself). A `concurrency`
    /// the user set applies to every provider, Docker too.
    pub windows: std::collections::BTreeMap<String, usize>,
    /// After this long, whatever is left is reported (and, under a session, left pending).
    pub deadline: Duration,
    /// Delay before the second listing that catches creates in flight when the owner died.
    pub settle: Duration,
    /// First retry delay; doubles on each attempt, with jitter.
    pub retry_initial: Duration,
    /// Cap on a single retry delay.
    pub retry_max: Duration,
    /// Calls a second never to exceed, per provider (each provider table's `rate`).
    pub rates: std::collections::BTreeMap<String, f64>,
}

/// The Docker driver.
#[derive(Debug, Clone)]
pub struct DockerSettings {
    /// `Some(false)` switches the driver off; `Some(true)` makes it configured even when no
    /// socket is present (so a missing daemon is reported as an error); `None` lets sandguard
    /// decide (configured when something names a daemon or the default socket exists).
    pub enabled: Option<bool>,
    /// The daemon (`unix:///path` or `tcp://host:port`) and what named it: `DOCKER_HOST`,
    /// `DOCKER_CONTEXT`, the file's `host`, the Docker CLI's current context ([`docker`]);
    /// `None`: nothing did, the default socket.
    pub host: Option<DockerHost>,
    /// A pinned Engine API version such as `1.41`; negotiated with the daemon when unset.
    pub api_version: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
}

/// What the user typed on the command line that overrides configuration.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub grace: Option<Duration>,
    pub state_dir: Option<PathBuf>,
    /// `--max-sandboxes`, `--max-creates`: each set one beats the file's.
    pub limits: crate::budget::Limits,
}

/// A configuration error; [`crate::cli`] maps every variant to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{file}: cannot read config file: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}:{line}: {what}: {message}")]
    Invalid {
        file: String,
        line: usize,
        what: String,
        message: String,
    },
    #[error("environment variable {var}: {error}")]
    Env { var: String, error: ValueError },
    /// `DAYTONA_JWT_TOKEN` without the organization a JWT acts in.
    #[error(
        "environment variable DAYTONA_JWT_TOKEN: set, but DAYTONA_ORGANIZATION_ID is not: a \
         Daytona JWT needs the organization it acts in (or set DAYTONA_API_KEY instead)"
    )]
    JwtWithoutOrganization,
    #[error("{flag}: {error}")]
    Flag { flag: String, error: ValueError },
    /// A money `spend` limit (the file's or a flag's) that no price could count.
    #[error(transparent)]
    Unpriced(#[from] crate::budget::Unpriced),
}

/// Where the environment comes from; tests pass a map instead of the process environment.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub(crate) struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

impl Env for std::collections::HashMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned().filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests;
