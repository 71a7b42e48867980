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

use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod cloud;
pub mod docker;
pub mod dotenv;
mod file;
pub mod fleet;
mod values;

pub use cloud::CloudSettings;
pub use docker::DockerHost;
pub use fleet::{FleetSettings, HostSettings};
pub use values::{parse_duration, HumanDuration, Positive, Rate, Secret};

use file::{parse_file, FileConfig, FilePlugin};
use values::{check_state_path, expand_home, parse_level, positive, StatePath};

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
}

/// The names of the built-in providers: their `[providers.NAME]` tables are theirs, and no
/// plugin may take their names.
pub const BUILT_IN_PROVIDERS: [&str; 6] = ["docker", "e2b", "daytona", "flyio", "tenki", "modal"];

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
}

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

/// The reclaim path's limits.
#[derive(Debug, Clone)]
pub struct ReclaimSettings {
    /// Removals in flight at once, per provider.
    pub concurrency: usize,
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
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("{flag}: {message}")]
    Flag { flag: String, message: String },
}

/// Where the environment comes from; tests pass a map instead of the process environment.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

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

impl Settings {
    /// Resolves file, environment and flags into settings, once.
    pub fn resolve(overrides: &Overrides, env: &dyn Env) -> Result<Settings, ConfigError> {
        let (source, file) = match find_config_file(overrides, env)? {
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    file: path.display().to_string(),
                    source,
                })?;
                let parsed = parse_file(&path, &text)?;
                (Some(path), parsed)
            }
            None => (None, FileConfig::default()),
        };
        Self::layer(source, file, overrides, env)
    }

    /// The settings a config file's `text` alone gives (no environment, no flags), as
    /// [`Settings::resolve`] would parse and layer it. For the fuzz target `config`; `path` is
    /// only named in errors. Touches no file.
    #[doc(hidden)]
    pub fn parse_config_text(path: &Path, text: &str) -> Result<Settings, ConfigError> {
        let file = parse_file(path, text)?;
        Self::layer(
            Some(path.to_path_buf()),
            file,
            &Overrides::default(),
            &std::collections::HashMap::new(),
        )
    }

    /// The built-in defaults, as if no file, environment or flag said anything.
    pub fn defaults() -> Settings {
        Self::layer(
            None,
            FileConfig::default(),
            &Overrides::default(),
            &std::collections::HashMap::new(),
        )
        .expect("defaults are valid")
    }

    fn layer(
        source: Option<PathBuf>,
        file: FileConfig,
        overrides: &Overrides,
        env: &dyn Env,
    ) -> Result<Settings, ConfigError> {
        let state_dir = state_dir(source.as_deref(), file.state_dir, overrides, env)?;
        let log_level = match env.var("SANDGUARD_LOG") {
            Some(v) => parse_level(&v).map_err(|message| ConfigError::Env {
                var: "SANDGUARD_LOG".into(),
                message,
            })?,
            None => file.log_level.map_or(tracing::Level::WARN, |l| l.0),
        };
        let grace = grace(file.watch.grace.map(|d| d.0), overrides, env)?;
        let r = file.reclaim;
        let p = file.providers;
        let d = p.docker;
        let (e2b, daytona, flyio) = (
            cloud::e2b(p.e2b, env),
            cloud::daytona(p.daytona, env)?,
            cloud::flyio(p.flyio, env),
        );
        let tenki = cloud::tenki(p.tenki, env);
        let (modal, modal_environment) = cloud::modal(p.modal, env);
        let plugins = plugins(p.plugins);
        let fleet = fleet::fleet(file.fleet, env)?;
        let host = fleet::host(file.host, env)?;
        let mut rates: std::collections::BTreeMap<String, f64> = [
            ("docker", d.rate.map(|r| r.0)),
            ("e2b", e2b.rate),
            ("daytona", daytona.rate),
            ("flyio", flyio.rate),
            ("tenki", tenki.rate),
            ("modal", modal.rate),
        ]
        .into_iter()
        .filter_map(|(name, rate)| Some((name.to_string(), rate?)))
        .collect();
        rates.extend(
            plugins
                .iter()
                .filter_map(|p| Some((p.name.clone(), p.rate?))),
        );
        Ok(Settings {
            source,
            state_dir,
            log_level,
            watch: WatchSettings {
                grace,
                renew_every: file
                    .watch
                    .renew_every
                    .map_or(Duration::from_secs(60), |d| d.0),
                docker_proxy: ProxyMode::from_file(file.watch.docker_proxy),
                cloud_proxy: ProxyMode::from_file(file.watch.cloud_proxy),
            },
            reclaim: ReclaimSettings {
                concurrency: r.concurrency.map_or(16, |c| c.0),
                deadline: r.deadline.map_or(Duration::from_secs(120), |d| d.0),
                settle: r.settle.map_or(Duration::from_secs(2), |d| d.0),
                retry_initial: r.retry_initial.map_or(Duration::from_millis(200), |d| d.0),
                retry_max: r.retry_max.map_or(Duration::from_secs(10), |d| d.0),
                rates,
            },
            sweep: SweepSettings {
                prune_after: match file.sweep.prune_after {
                    Some(HumanDuration(d)) if d.is_zero() => None,
                    Some(HumanDuration(d)) => Some(d),
                    None => Some(Duration::from_secs(7 * 86_400)),
                },
            },
            docker: DockerSettings {
                enabled: d.enabled,
                host: docker::resolve(d.host, env),
                api_version: env.var("DOCKER_API_VERSION").or(d.api_version),
                timeout: d.timeout.map_or(Duration::from_secs(30), |d| d.0),
            },
            e2b,
            daytona,
            flyio,
            tenki,
            modal,
            modal_environment,
            plugins,
            fleet,
            host,
        })
    }
}

/// The state directory: the flag, else `SANDGUARD_STATE_DIR`, else the file's `state_dir`,
/// else the XDG default; `~` expanded, a relative path refused.
fn state_dir(
    source: Option<&Path>,
    file: Option<StatePath>,
    overrides: &Overrides,
    env: &dyn Env,
) -> Result<PathBuf, ConfigError> {
    if let Some(dir) = &overrides.state_dir {
        return Ok(dir.clone());
    }
    if let Some(var) = env.var("SANDGUARD_STATE_DIR") {
        let path = PathBuf::from(var);
        return check_state_path(&path)
            .and_then(|()| expand_home(&path, env))
            .map_err(|message| ConfigError::Env {
                var: "SANDGUARD_STATE_DIR".into(),
                message,
            });
    }
    match file {
        Some(StatePath(path)) => expand_home(&path, env).map_err(|message| ConfigError::Invalid {
            file: source.map(|p| p.display().to_string()).unwrap_or_default(),
            line: 0,
            what: "key `state_dir`".into(),
            message,
        }),
        None => Ok(default_state_dir(env)),
    }
}

/// The lease grace: `--grace`, else `SANDGUARD_GRACE`, else the file's, else 10 minutes; never
/// zero.
fn grace(
    file: Option<Duration>,
    overrides: &Overrides,
    env: &dyn Env,
) -> Result<Duration, ConfigError> {
    if let Some(g) = overrides.grace {
        return positive(g).map_err(|message| ConfigError::Flag {
            flag: "--grace".into(),
            message,
        });
    }
    let var = "SANDGUARD_GRACE";
    match env.var(var) {
        Some(v) => parse_duration(&v)
            .and_then(positive)
            .map_err(|message| ConfigError::Env {
                var: var.into(),
                message,
            }),
        None => Ok(file.unwrap_or(Duration::from_secs(600))),
    }
}

/// The plugin tables, resolved.
fn plugins(file: std::collections::BTreeMap<String, FilePlugin>) -> Vec<PluginSettings> {
    file.into_iter()
        .map(|(name, f)| PluginSettings {
            name,
            command: f.command.map(|c| c.0),
            timeout: f.timeout.map_or(Duration::from_secs(30), |d| d.0),
            rate: f.rate.map(|r| r.0),
        })
        .collect()
}

/// `$XDG_STATE_HOME/sandguard`, else `~/.local/state/sandguard`; `/var/lib/sandguard` for root
/// without a home.
fn default_state_dir(env: &dyn Env) -> PathBuf {
    if let Some(xdg) = env.var("XDG_STATE_HOME") {
        return Path::new(&xdg).join("sandguard");
    }
    match env.var("HOME") {
        Some(home) => Path::new(&home).join(".local/state/sandguard"),
        None => PathBuf::from("/var/lib/sandguard"),
    }
}

fn find_config_file(overrides: &Overrides, env: &dyn Env) -> Result<Option<PathBuf>, ConfigError> {
    let explicit = overrides
        .config
        .clone()
        .or_else(|| env.var("SANDGUARD_CONFIG").map(PathBuf::from));
    if let Some(path) = explicit {
        return Ok(Some(path));
    }
    let xdg = env
        .var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env.var("HOME").map(|h| Path::new(&h).join(".config")));
    let candidates = xdg
        .map(|d| d.join("sandguard/config.toml"))
        .into_iter()
        .chain(std::iter::once(PathBuf::from("/etc/sandguard/config.toml")));
    for candidate in candidates {
        if candidate.is_file() {
            return Ok(Some(candidate));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests;
