//! Resolving: finding the config file and layering flags over the environment over the file
//! over the built-in defaults, once, into [`Settings`] (the order is the module's: see
//! [`crate::config`]). The built-in defaults are written here, each beside the key it fills.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::file::{parse_file, FileConfig, FilePlugin};
use super::values::{check_state_path, expand_home, parse_level, positive, StatePath};
use super::{
    cloud, docker, fleet, parse_duration, ConfigError, DockerSettings, Env, HumanDuration,
    Overrides, PluginSettings, ProxyMode, ReclaimSettings, Settings, SweepSettings, WatchSettings,
};

impl Settings {
    /// The session's limits and each provider's ([`crate::budget::Budget`]).
    pub(crate) fn budget(&self) -> crate::budget::Budget {
        crate::budget::Budget {
            session: self.limits,
            providers: self.provider_limits.clone(),
            prices: self.prices.clone(),
        }
    }

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

    pub(super) fn layer(
        source: Option<PathBuf>,
        file: FileConfig,
        overrides: &Overrides,
        env: &dyn Env,
    ) -> Result<Settings, ConfigError> {
        let state_dir = state_dir(source.as_deref(), file.state_dir, overrides, env)?;
        let log_level = match env.var("SANDGUARD_LOG") {
            Some(v) => parse_level(&v).map_err(|error| ConfigError::Env {
                var: "SANDGUARD_LOG".into(),
                error,
            })?,
            None => file.log_level.map_or(tracing::Level::WARN, |l| l.0),
        };
        let grace = grace(file.watch.grace.map(|d| d.0), overrides, env)?;
        let r = file.reclaim;
        let mut p = file.providers;
        let prices = p.take_prices();
        let provider_limits: std::collections::BTreeMap<String, crate::budget::Limits> = [
            ("docker", p.docker.limits),
            ("e2b", p.e2b.limits),
            ("daytona", p.daytona.limits),
            ("flyio", p.flyio.limits),
            ("tenki", p.tenki.0.limits),
            ("modal", p.modal.limits),
        ]
        .into_iter()
        .map(|(name, l)| (name.to_string(), l))
        .chain(
            p.plugins
                .iter()
                .map(|(name, plugin)| (name.clone(), plugin.limits)),
        )
        .filter_map(|(name, l)| Some((name, l?.limits())))
        .collect();
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
        let settings = Settings {
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
                ryuk: if file.watch.keep_ryuk == Some(true) {
                    super::Ryuk::Kept
                } else if env.var(super::RYUK_DISABLED).is_some() {
                    super::Ryuk::UsersOwn
                } else {
                    super::Ryuk::Disabled
                },
            },
            reclaim: ReclaimSettings {
                concurrency: r.concurrency.map_or(16, |c| c.0),
                windows: if r.concurrency.is_none() {
                    [("docker".to_string(), super::DOCKER_WINDOW)].into()
                } else {
                    Default::default()
                },
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
                host: Some(docker::resolve(d.host, env)),
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
            prices,
            limits: crate::budget::Limits {
                sandboxes: overrides.limits.sandboxes.or(file.limits.sandboxes),
                creates: overrides.limits.creates.or(file.limits.creates),
                lifetime: overrides
                    .limits
                    .lifetime
                    .or(file.limits.lifetime.map(|d| d.0)),
                spend: overrides.limits.spend.or(file.limits.spend.map(|s| s.0)),
                on_spend: overrides.limits.on_spend.or(file.limits.on_spend),
            },
            provider_limits,
            notify: super::notify::notify(file.notify),
        };
        // A money limit nothing can count is refused with the rest of the configuration.
        if let Some(unpriced) = settings.budget().unpriced() {
            return Err(ConfigError::Unpriced(unpriced));
        }
        Ok(settings)
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
            .map_err(|error| ConfigError::Env {
                var: "SANDGUARD_STATE_DIR".into(),
                error,
            });
    }
    match file {
        Some(StatePath(path)) => expand_home(&path, env).map_err(|e| ConfigError::Invalid {
            file: source.map(|p| p.display().to_string()).unwrap_or_default(),
            line: 0,
            what: "key `state_dir`".into(),
            message: e.to_string(),
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
        return positive(g).map_err(|error| ConfigError::Flag {
            flag: "--grace".into(),
            error,
        });
    }
    let var = "SANDGUARD_GRACE";
    match env.var(var) {
        Some(v) => parse_duration(&v)
            .and_then(positive)
            .map_err(|error| ConfigError::Env {
                var: var.into(),
                error,
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
///
/// The same on macOS, rather than `~/Library/Application Support/sandguard`: sandguard is a
/// command-line tool, its config is already found the XDG way on both platforms
/// (`~/.config/sandguard`), and the shorter path matters there, as the Docker proxy's socket
/// lives under it (`sessions/<session>.docker/docker.sock`) and macOS's `sun_path` holds 103
/// bytes: under `/Users/NAME/.local/state/sandguard` it fits for a user name of up to 12 bytes,
/// under `~/Library/Application Support/sandguard` for no user at all (106 bytes with an empty
/// name). A longer path moves the socket to the temp dir or `/tmp` (`proxy::docker`).
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
