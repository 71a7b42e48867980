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

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

pub mod cloud;

pub use cloud::CloudSettings;

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
    /// `[providers.NAME]` tables for plugin providers (any name that is not a built-in).
    pub plugins: Vec<PluginSettings>,
}

/// The names of the built-in providers: their `[providers.NAME]` tables are theirs, and no
/// plugin may take their names.
pub const BUILT_IN_PROVIDERS: [&str; 6] = ["docker", "e2b", "daytona", "flyio", "tenki", "modal"];

/// A plugin provider as the config file describes it (`[providers.NAME]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSettings {
    pub name: String,
    /// The program and its leading arguments; `None`: `sandguard-provider-NAME` on `PATH`.
    pub command: Option<Vec<String>>,
    /// How long one call may take before the plugin is killed.
    pub timeout: Duration,
}

/// The sidecar's lease.
#[derive(Debug, Clone)]
pub struct WatchSettings {
    /// How long an owner that sends heartbeats may go silent before its lease expires.
    pub grace: Duration,
    /// How often the sidecar renews its sandboxes' server-side TTLs (`0` never does).
    pub renew_every: Duration,
    /// Serve a labelling Docker API proxy to the guarded program by default.
    pub docker_proxy: bool,
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
}

/// The Docker driver.
#[derive(Debug, Clone)]
pub struct DockerSettings {
    /// `Some(false)` switches the driver off; `Some(true)` makes it configured even when no
    /// socket is present (so a missing daemon is reported as an error); `None` lets sandguard
    /// decide (configured when `DOCKER_HOST` is set or the default socket exists).
    pub enabled: Option<bool>,
    /// `unix:///path` or `tcp://host:port`; `DOCKER_HOST` when unset.
    pub host: Option<String>,
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

/// A duration written the human way: `500ms`, `5s`, `10m`, `2h`, `7d`, or a sum such as `1h30m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl std::str::FromStr for HumanDuration {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
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
pub struct Positive(pub Duration);

impl<'de> Deserialize<'de> for Positive {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let HumanDuration(d) = HumanDuration::deserialize(d)?;
        positive(d).map(Positive).map_err(serde::de::Error::custom)
    }
}

fn positive(d: Duration) -> Result<Duration, String> {
    if d.is_zero() {
        Err("must be longer than 0".into())
    } else {
        Ok(d)
    }
}

/// `state_dir` as written: an absolute path, or one starting with `~/` (the home directory).
/// A relative path is refused: the sidecar runs from `/`, and the Docker proxy's socket path
/// (`DOCKER_HOST`) must not depend on the guarded program's working directory.
#[derive(Debug, Clone)]
struct StatePath(PathBuf);

impl<'de> Deserialize<'de> for StatePath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = PathBuf::deserialize(d)?;
        check_state_path(&raw)
            .map(|()| StatePath(raw))
            .map_err(serde::de::Error::custom)
    }
}

fn check_state_path(p: &Path) -> Result<(), String> {
    let text = p.to_string_lossy();
    if p.is_absolute() || text == "~" || text.starts_with("~/") {
        Ok(())
    } else if text.starts_with('~') {
        Err("`~user` is not supported: write the absolute path".into())
    } else {
        Err("must be an absolute path (or start with ~/)".into())
    }
}

/// `~` and `~/…` expanded with `$HOME`.
fn expand_home(p: &Path, env: &dyn Env) -> Result<PathBuf, String> {
    let text = p.to_string_lossy();
    let rest = match text.strip_prefix('~') {
        None => return Ok(p.to_path_buf()),
        Some(rest) => rest.trim_start_matches('/'),
    };
    let home = env.var("HOME").ok_or("starts with ~ but HOME is not set")?;
    Ok(Path::new(&home).join(rest))
}

/// Parses `5s`, `10m`, `2h`, `7d`, `250ms`, `1h30m`, or `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!(
            "invalid duration {text:?}: expected a number and a unit, such as 5s, 10m, 2h or 7d"
        )
    };
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

// The file as written. Every table denies unknown keys so a typo is an error, not a silent
// default.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    state_dir: Option<StatePath>,
    log_level: Option<LogLevel>,
    #[serde(default)]
    watch: FileWatch,
    #[serde(default)]
    reclaim: FileReclaim,
    #[serde(default)]
    sweep: FileSweep,
    #[serde(default)]
    providers: FileProviders,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileWatch {
    grace: Option<Positive>,
    renew_every: Option<HumanDuration>,
    docker_proxy: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSweep {
    prune_after: Option<HumanDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileReclaim {
    concurrency: Option<Concurrency>,
    deadline: Option<Positive>,
    settle: Option<HumanDuration>,
    retry_initial: Option<Positive>,
    retry_max: Option<Positive>,
}

/// `[providers]`: a table per built-in provider, and any other name is a plugin. serde's
/// `deny_unknown_fields` does not combine with `flatten`, so the tables are routed by hand;
/// each one still denies its own unknown keys.
#[derive(Debug, Default)]
struct FileProviders {
    docker: FileDocker,
    e2b: cloud::FileKeyed,
    daytona: cloud::FileKeyed,
    flyio: cloud::FileFly,
    tenki: cloud::FileKeyed,
    modal: cloud::FileModal,
    plugins: std::collections::BTreeMap<String, FilePlugin>,
}

impl<'de> Deserialize<'de> for FileProviders {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(ProvidersVisitor)
    }
}

struct ProvidersVisitor;

impl<'de> serde::de::Visitor<'de> for ProvidersVisitor {
    type Value = FileProviders;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of provider tables")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<FileProviders, A::Error> {
        let mut p = FileProviders::default();
        while let Some(name) = map.next_key::<String>()? {
            match name.as_str() {
                "docker" => p.docker = map.next_value()?,
                "e2b" => p.e2b = map.next_value()?,
                "daytona" => p.daytona = map.next_value()?,
                "flyio" => p.flyio = map.next_value()?,
                "tenki" => p.tenki = map.next_value()?,
                "modal" => p.modal = map.next_value()?,
                _ if !crate::protocol::valid_provider(&name) => {
                    return Err(serde::de::Error::custom(format!(
                        "invalid provider name {name:?}: a plugin's name is 1 to 32 lowercase \
                         letters, digits, `-` or `_`"
                    )))
                }
                _ => {
                    let plugin: FilePlugin = map.next_value()?;
                    p.plugins.insert(name, plugin);
                }
            }
        }
        Ok(p)
    }
}

/// `[providers.NAME]` for a plugin provider.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePlugin {
    command: Option<PluginCommand>,
    timeout: Option<Positive>,
}

/// A plugin's `command`: a program and its leading arguments, never empty.
#[derive(Debug)]
struct PluginCommand(Vec<String>);

impl<'de> Deserialize<'de> for PluginCommand {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let argv = Vec::<String>::deserialize(d)?;
        if argv.first().is_none_or(String::is_empty) {
            return Err(serde::de::Error::custom(
                "must name a program: [\"/path/to/plugin\", \"arg\", …]",
            ));
        }
        Ok(PluginCommand(argv))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileDocker {
    enabled: Option<bool>,
    host: Option<String>,
    api_version: Option<String>,
    timeout: Option<Positive>,
}

/// A concurrency limit: an integer from 1 to 1024.
#[derive(Debug, Clone, Copy)]
struct Concurrency(usize);

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
struct LogLevel(tracing::Level);

impl<'de> Deserialize<'de> for LogLevel {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_level(&s)
            .map(LogLevel)
            .map_err(serde::de::Error::custom)
    }
}

fn parse_level(s: &str) -> Result<tracing::Level, String> {
    s.parse::<tracing::Level>()
        .map_err(|_| format!("unknown log level {s:?}: expected error, warn, info, debug or trace"))
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
        let env_duration = |var: &str| -> Result<Option<Duration>, ConfigError> {
            env.var(var)
                .map(|v| {
                    parse_duration(&v).map_err(|message| ConfigError::Env {
                        var: var.into(),
                        message,
                    })
                })
                .transpose()
        };
        let state_dir = match (&overrides.state_dir, env.var("SANDGUARD_STATE_DIR")) {
            (Some(dir), _) => dir.clone(),
            (None, Some(var)) => {
                let path = PathBuf::from(var);
                check_state_path(&path)
                    .and_then(|()| expand_home(&path, env))
                    .map_err(|message| ConfigError::Env {
                        var: "SANDGUARD_STATE_DIR".into(),
                        message,
                    })?
            }
            (None, None) => match file.state_dir {
                Some(StatePath(path)) => {
                    expand_home(&path, env).map_err(|message| ConfigError::Invalid {
                        file: source
                            .as_deref()
                            .map(|p| p.display().to_string())
                            .unwrap_or_default(),
                        line: 0,
                        what: "key `state_dir`".into(),
                        message,
                    })?
                }
                None => default_state_dir(env),
            },
        };
        let log_level = match env.var("SANDGUARD_LOG") {
            Some(v) => parse_level(&v).map_err(|message| ConfigError::Env {
                var: "SANDGUARD_LOG".into(),
                message,
            })?,
            None => file.log_level.map(|l| l.0).unwrap_or(tracing::Level::WARN),
        };
        let grace = match overrides.grace {
            Some(g) => positive(g).map_err(|message| ConfigError::Flag {
                flag: "--grace".into(),
                message,
            })?,
            None => match env_duration("SANDGUARD_GRACE")? {
                Some(g) => positive(g).map_err(|message| ConfigError::Env {
                    var: "SANDGUARD_GRACE".into(),
                    message,
                })?,
                None => file
                    .watch
                    .grace
                    .map(|d| d.0)
                    .unwrap_or(Duration::from_secs(600)),
            },
        };
        let r = file.reclaim;
        let p = file.providers;
        let d = p.docker;
        Ok(Settings {
            source,
            state_dir,
            log_level,
            watch: WatchSettings {
                grace,
                renew_every: file
                    .watch
                    .renew_every
                    .map(|d| d.0)
                    .unwrap_or(Duration::from_secs(60)),
                docker_proxy: file.watch.docker_proxy.unwrap_or(false),
            },
            reclaim: ReclaimSettings {
                concurrency: r.concurrency.map(|c| c.0).unwrap_or(16),
                deadline: r.deadline.map(|d| d.0).unwrap_or(Duration::from_secs(120)),
                settle: r.settle.map(|d| d.0).unwrap_or(Duration::from_secs(2)),
                retry_initial: r
                    .retry_initial
                    .map(|d| d.0)
                    .unwrap_or(Duration::from_millis(200)),
                retry_max: r.retry_max.map(|d| d.0).unwrap_or(Duration::from_secs(10)),
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
                host: env.var("DOCKER_HOST").or(d.host),
                api_version: env.var("DOCKER_API_VERSION").or(d.api_version),
                timeout: d.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(30)),
            },
            e2b: cloud::e2b(p.e2b, env),
            daytona: cloud::daytona(p.daytona, env),
            flyio: cloud::flyio(p.flyio, env),
            tenki: cloud::tenki(p.tenki, env),
            modal: cloud::modal(p.modal, env),
            plugins: plugins(p.plugins),
        })
    }
}

/// The plugin tables, resolved.
fn plugins(file: std::collections::BTreeMap<String, FilePlugin>) -> Vec<PluginSettings> {
    file.into_iter()
        .map(|(name, f)| PluginSettings {
            name,
            command: f.command.map(|c| c.0),
            timeout: f.timeout.map(|d| d.0).unwrap_or(Duration::from_secs(30)),
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

fn parse_file(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
    let file = parse_toml(path, text)?;
    let r = &file.reclaim;
    if let (Some(first), Some(max)) = (r.retry_initial, r.retry_max) {
        if max.0 < first.0 {
            return Err(ConfigError::Invalid {
                file: path.display().to_string(),
                line: locate(text, "reclaim", "retry_max"),
                what: "key `reclaim.retry_max`".into(),
                message: "must not be shorter than reclaim.retry_initial".into(),
            });
        }
    }
    Ok(file)
}

/// The line of `key` in `[table]` (1 when it cannot be found).
fn locate(text: &str, table: &str, key: &str) -> usize {
    let mut current = String::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            current = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
        } else if current == table
            && line.split('=').next().map(|k| k.trim().trim_matches('"')) == Some(key)
        {
            return n + 1;
        }
    }
    1
}

fn parse_toml(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
    toml::from_str::<FileConfig>(text).map_err(|e| {
        let offset = e.span().map(|s| s.start).unwrap_or(0);
        let line = line_of(text, offset);
        ConfigError::Invalid {
            file: path.display().to_string(),
            line,
            what: describe_location(text, offset, e.message()),
            message: first_line(e.message()),
        }
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// Names the key at `offset`: the dotted path of the enclosing `[table]` plus the key written
/// on that line. For an unknown field serde's message carries the key itself.
fn describe_location(text: &str, offset: usize, message: &str) -> String {
    let before = &text[..offset.min(text.len())];
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line_end = text[line_start..]
        .find('\n')
        .map(|i| line_start + i)
        .unwrap_or(text.len());
    let line = text[line_start..line_end].trim();
    let table = before[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && !l.starts_with("[["))
        .map(|l| l.trim_matches(|c| c == '[' || c == ']').trim().to_string());
    let key = if let Some(unknown) = message.strip_prefix("unknown field `") {
        unknown.split('`').next().map(str::to_string)
    } else if line.starts_with('[') {
        return format!(
            "table `{}`",
            line.trim_matches(|c| c == '[' || c == ']').trim()
        );
    } else {
        line.split('=')
            .next()
            .map(|k| k.trim().trim_matches('"').to_string())
            .filter(|k| !k.is_empty())
    };
    match (table, key) {
        (Some(t), Some(k)) => format!("key `{t}.{k}`"),
        (None, Some(k)) => format!("key `{k}`"),
        (Some(t), None) => format!("table `{t}`"),
        (None, None) => "file".to_string(),
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn durations_read_the_human_way() {
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        for bad in ["", "5", "s", "5x", "-5s", "5 s", "1.5h", "99999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn the_documented_example_parses_and_states_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sandguard.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let file = parse_file(&path, &text).unwrap();
        let from_example =
            Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
        let defaults = Settings::layer(
            None,
            FileConfig::default(),
            &Overrides::default(),
            &env(&[("HOME", "/h")]),
        )
        .unwrap();
        // The example spells out the defaults, so reading it must change nothing.
        assert_eq!(format!("{from_example:?}"), format!("{defaults:?}"));
        // And it mentions every key the parser knows.
        for key in [
            "state_dir",
            "log_level",
            "[watch]",
            "grace",
            "[reclaim]",
            "concurrency",
            "deadline",
            "settle",
            "retry_initial",
            "retry_max",
            "[providers.docker]",
            "enabled",
            "host",
            "api_version",
            "timeout",
            "renew_every",
            "docker_proxy",
            "[sweep]",
            "prune_after",
            "[providers.e2b]",
            "[providers.daytona]",
            "[providers.flyio]",
            "[providers.tenki]",
            "[providers.modal]",
            "api_key",
            "api_url",
            "api_token",
            "app",
            "api_hostname",
            "token_id",
            "token_secret",
            "server_url",
            "command",
        ] {
            assert!(
                text.contains(key),
                "config/sandguard.toml does not document {key}"
            );
        }
    }

    #[test]
    fn an_unknown_key_names_file_line_and_key() {
        let text = "[watch]\ngrace = \"5m\"\n\n[reclaim]\nconcurency = 4\n";
        let err = parse_file(Path::new("/etc/x.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/etc/x.toml:5: key `reclaim.concurency`"),
            "{err}"
        );
    }

    #[test]
    fn a_bad_value_names_file_line_and_key() {
        let text = "log_level = \"info\"\n[reclaim]\ndeadline = \"2 minutes\"\n";
        let err = parse_file(Path::new("c.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("c.toml:3: key `reclaim.deadline`"), "{err}");
        assert!(err.contains("invalid duration"), "{err}");
        let err = parse_file(Path::new("c.toml"), "[reclaim]\nconcurrency = 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("c.toml:2: key `reclaim.concurrency`"),
            "{err}"
        );
    }

    #[test]
    fn flags_beat_env_beat_file_beat_defaults() {
        let file = parse_file(Path::new("c"), "[watch]\ngrace = \"1m\"\n").unwrap();
        let e = env(&[("SANDGUARD_GRACE", "2m"), ("HOME", "/h")]);
        let flags = Overrides {
            grace: Some(Duration::from_secs(180)),
            ..Default::default()
        };
        let s = Settings::layer(None, file, &flags, &e).unwrap();
        assert_eq!(s.watch.grace, Duration::from_secs(180));

        let file = parse_file(Path::new("c"), "[watch]\ngrace = \"1m\"\n").unwrap();
        let s = Settings::layer(None, file, &Overrides::default(), &e).unwrap();
        assert_eq!(s.watch.grace, Duration::from_secs(120));

        let file = parse_file(Path::new("c"), "[watch]\ngrace = \"1m\"\n").unwrap();
        let s =
            Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(s.watch.grace, Duration::from_secs(60));
        assert_eq!(s.state_dir, PathBuf::from("/h/.local/state/sandguard"));
    }

    #[test]
    fn a_bad_environment_value_is_named() {
        let e = env(&[("SANDGUARD_GRACE", "soon")]);
        let err =
            Settings::layer(None, FileConfig::default(), &Overrides::default(), &e).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("environment variable SANDGUARD_GRACE:"),
            "{err}"
        );
    }

    #[test]
    fn any_other_provider_table_is_a_plugin_with_command_and_timeout_only() {
        let text = "[providers.docker]\nenabled = false\n\n[providers.acme]\ncommand = [\"/opt/acme\", \"--fast\"]\ntimeout = \"5s\"\n\n[providers.zed]\n";
        let file = parse_file(Path::new("c.toml"), text).unwrap();
        let s =
            Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(s.docker.enabled, Some(false));
        assert_eq!(
            s.plugins,
            vec![
                PluginSettings {
                    name: "acme".into(),
                    command: Some(vec!["/opt/acme".into(), "--fast".into()]),
                    timeout: Duration::from_secs(5),
                },
                PluginSettings {
                    name: "zed".into(),
                    command: None,
                    timeout: Duration::from_secs(30),
                },
            ]
        );
    }

    #[test]
    fn a_plugin_table_denies_unknown_keys_and_names_file_line_and_key() {
        let text = "[providers.acme]\ncommand = [\"/opt/acme\"]\napi_key = \"k\"\n";
        let err = parse_file(Path::new("c.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("c.toml:3: key `providers.acme.api_key`"),
            "{err}"
        );
        let text = "[providers.docker]\nenabld = false\n";
        let err = parse_file(Path::new("c.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("c.toml:2: key `providers.docker.enabld`"),
            "{err}"
        );
        let text = "[providers.acme]\ncommand = []\n";
        let err = parse_file(Path::new("c.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("c.toml:2: key `providers.acme.command`"),
            "{err}"
        );
        let text = "[providers.Acme]\ncommand = [\"x\"]\n";
        let err = parse_file(Path::new("c.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid provider name \"Acme\""), "{err}");
    }

    #[test]
    fn values_that_make_no_sense_name_file_line_and_key() {
        for (text, at) in [
            ("[watch]\ngrace = \"0\"\n", "c.toml:2: key `watch.grace`"),
            (
                "[reclaim]\ndeadline = \"0\"\n",
                "c.toml:2: key `reclaim.deadline`",
            ),
            (
                "[reclaim]\nretry_initial = \"0\"\n",
                "c.toml:2: key `reclaim.retry_initial`",
            ),
            (
                "[reclaim]\nretry_initial = \"5s\"\nretry_max = \"1s\"\n",
                "c.toml:3: key `reclaim.retry_max`",
            ),
            (
                "[providers.e2b]\ntimeout = \"0\"\n",
                "c.toml:2: key `providers.e2b.timeout`",
            ),
            (
                "state_dir = \"relative/dir\"\n",
                "c.toml:1: key `state_dir`",
            ),
            ("state_dir = \"~bob/x\"\n", "c.toml:1: key `state_dir`"),
        ] {
            let err = parse_file(Path::new("c.toml"), text)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(at), "{text:?}: {err}");
        }
        let e = env(&[("SANDGUARD_GRACE", "0"), ("HOME", "/h")]);
        let err = Settings::layer(None, FileConfig::default(), &Overrides::default(), &e);
        assert!(err.unwrap_err().to_string().contains("SANDGUARD_GRACE"));
    }

    #[test]
    fn a_tilde_state_dir_is_the_home_directory() {
        let file = parse_file(Path::new("c"), "state_dir = \"~/.sg\"\n").unwrap();
        let s =
            Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(s.state_dir, PathBuf::from("/h/.sg"));
        let e = env(&[("HOME", "/h"), ("SANDGUARD_STATE_DIR", "rel")]);
        let err = Settings::layer(None, FileConfig::default(), &Overrides::default(), &e);
        assert!(err.unwrap_err().to_string().contains("SANDGUARD_STATE_DIR"));
    }

    #[test]
    fn secrets_never_print() {
        let s = Secret::new("e2b_0123456789abcdef");
        assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
        assert_eq!(s.expose(), "e2b_0123456789abcdef");
    }
}
