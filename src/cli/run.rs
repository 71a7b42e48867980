//! The wrapper's command line: `sandguard -- CMD…` and `sandguard run [--grace D] -- CMD…`.
//!
//! What the user typed ([`Options`], [`Args`]) becomes one [`Wrap`] and one call of the
//! library's wrapper ([`crate::wrapper::run`], whose docs tell the steps, pid 1 included);
//! here only its warnings are printed and its outcome mapped to an exit code. CMD keeps its
//! own status when it runs (the exec replaced this process; as pid 1, [`Wrapped::Ended`]).
//! Every failure before CMD ran, a bad config included, is exit 125
//! ([`WrapError::BeforeCommand`], a bad config as [`Failure::Config`]); CMD not found is 127,
//! not executable 126.
//!
//! With `--docker-proxy` (or `[watch] docker_proxy = true`) the sidecar also serves a Docker
//! API proxy, and with `--cloud-proxy` (or `[watch] cloud_proxy = true`) the cloud API proxy
//! (E2B, Daytona); each variable CMD gets from them is exported.

use std::ffi::OsString;
use std::io::Write;

use super::{Error, Exit};
use crate::config::{ConfigError, HumanDuration, Positive, ProxyMode, Settings};
use crate::wrapper::{self, Failure, Wrap, WrapError, Wrapped};

/// What `run` and the short form `sandguard [OPTIONS] -- CMD` take.
#[derive(Debug, Clone, Default, clap::Args)]
pub(super) struct Options {
    /// Lease grace once heartbeats start (default 10m)
    #[arg(long, value_name = "D")]
    pub grace: Option<HumanDuration>,
    /// Serve CMD a Docker API proxy (DOCKER_HOST) that labels and claims every container,
    /// network and volume it creates, and fail if that cannot be done (default: on when a
    /// Docker daemon is reachable; [watch] docker_proxy)
    #[arg(long, overrides_with = "no_docker_proxy")]
    pub docker_proxy: bool,
    /// Do not serve the Docker API proxy
    #[arg(long, overrides_with = "docker_proxy")]
    pub no_docker_proxy: bool,
    /// Serve CMD the cloud API proxy (E2B_API_URL / DAYTONA_API_URL) that labels and claims
    /// every sandbox the E2B and Daytona SDKs create, and fail if neither is configured
    /// (default: on for each whose credentials are found; [watch] cloud_proxy)
    #[arg(long, overrides_with = "no_cloud_proxy")]
    pub cloud_proxy: bool,
    /// Do not serve the cloud API proxy
    #[arg(long, overrides_with = "cloud_proxy")]
    pub no_cloud_proxy: bool,
    /// Say nothing on the terminal when CMD ends (warnings at start are still printed)
    #[arg(long, short = 'q')]
    pub quiet: bool,
    #[command(flatten)]
    pub limits: Limits,
}

/// The session's limits on what it creates through the proxies (`[limits]`): a create over
/// one is refused before it reaches the provider, with a `sandguard:` error naming the limit.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub(super) struct Limits {
    /// At most N sandboxes alive at once ([limits] sandboxes)
    #[arg(long, value_name = "N")]
    pub max_sandboxes: Option<u32>,
    /// At most N sandboxes created over the session's life ([limits] creates)
    #[arg(long, value_name = "N")]
    pub max_creates: Option<u32>,
    /// No sandbox older than this, e.g. 2h: removed at that age, its owner alive or not
    /// ([limits] lifetime)
    #[arg(long, value_name = "DURATION")]
    pub max_lifetime: Option<Positive>,
    /// At most this much spent over the session: sandbox time (20h) or money at the
    /// configured prices ($5); creates past it are refused ([limits] spend)
    #[arg(long, value_name = "TIME|$MONEY")]
    pub max_spend: Option<crate::config::SpendValue>,
    /// At the spend limit, also remove every sandbox the session holds ([limits] on_spend)
    #[arg(long, value_name = "WHAT")]
    pub on_spend: Option<crate::budget::OnSpend>,
}

impl Limits {
    pub(super) fn given(self) -> crate::budget::Limits {
        crate::budget::Limits {
            sandboxes: self.max_sandboxes,
            creates: self.max_creates,
            lifetime: self.max_lifetime.map(|d| d.0),
            spend: self.max_spend.map(|s| s.0),
            on_spend: self.on_spend,
        }
    }
}

impl Options {
    /// Whether any option was given (the short form's options before a subcommand are a
    /// usage error, not silently dropped).
    pub(super) fn is_given(&self) -> bool {
        self.grace.is_some()
            || self.docker_proxy
            || self.no_docker_proxy
            || self.cloud_proxy
            || self.no_cloud_proxy
            || self.quiet
            || self.limits.given().given()
    }

    /// The Docker proxy's mode: the flag, else the config's (auto by default).
    pub(super) fn docker_proxy(&self, settings: &Settings) -> ProxyMode {
        mode(
            self.docker_proxy,
            self.no_docker_proxy,
            settings.watch.docker_proxy,
        )
    }

    /// The cloud proxy's mode: the flag, else the config's (auto by default).
    pub(super) fn cloud_proxy(&self, settings: &Settings) -> ProxyMode {
        mode(
            self.cloud_proxy,
            self.no_cloud_proxy,
            settings.watch.cloud_proxy,
        )
    }
}

fn mode(on: bool, off: bool, config: ProxyMode) -> ProxyMode {
    match (on, off) {
        (true, _) => ProxyMode::On,
        (_, true) => ProxyMode::Off,
        _ => config,
    }
}

#[derive(Debug, clap::Args)]
pub(super) struct Args {
    #[command(flatten)]
    pub options: Options,
    /// The program to guard, and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// Runs CMD under a new session: returns only when CMD could not be run (or, as pid 1, when
/// it ended).
pub(super) fn run(args: Args, settings: Result<Settings, ConfigError>) -> Result<Exit, Error> {
    let settings = settings.map_err(|e| WrapError::from(Failure::Config(e)))?;
    let wrap = Wrap {
        grace: args.options.grace.map(|g| g.0),
        docker_proxy: args.options.docker_proxy(&settings),
        cloud_proxy: args.options.cloud_proxy(&settings),
        quiet: args.options.quiet,
        command: args.command,
    };
    let mut stderr = std::io::stderr();
    let mut warn = |w: &str| {
        let _ = writeln!(stderr, "sandguard: warning: {w}");
    };
    match wrapper::run(&wrap, &settings, &mut warn) {
        Ok(Wrapped::Ended(status)) => Ok(Exit::Wrapped(status)),
        Ok(Wrapped::Abandoned) => Ok(Exit::OwnFailure),
        Err(e) => Err(e.into()),
    }
}
