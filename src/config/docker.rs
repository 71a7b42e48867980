//! Where the Docker daemon is: `DOCKER_HOST`, the Docker CLI's contexts, the config file, the
//! sockets the engines make where their users find them ([`sockets`]), or the default socket,
//! resolved once for the Docker driver and the `--docker-proxy` upstream alike.
//!
//! The Docker CLI picks its context from `--context`, else the default context when `--host` or
//! `DOCKER_HOST` is set, else `DOCKER_CONTEXT`, else `currentContext` in its `config.json`
//! (what `docker context use` writes). Its config directory is `$DOCKER_CONFIG`, else
//! `~/.docker`; a context named N is described by
//! `<config dir>/contexts/meta/<sha256 of N in hex>/meta.json`, whose `Endpoints.docker.Host`
//! is the daemon's address.
//!
//! Decisions:
//! - Precedence: `DOCKER_HOST` > `DOCKER_CONTEXT` > `[providers.docker] host` >
//!   `currentContext` in the Docker CLI's `config.json` > the engines' sockets, in one order
//!   per platform, the first that exists and that no other user could have made ([`sockets`]:
//!   on macOS Docker Desktop, Colima, OrbStack, Rancher Desktop, Podman machine, then
//!   `/var/run/docker.sock`; on Linux rootless Docker, rootless Podman, rootful Podman, then
//!   `/var/run/docker.sock`) > `unix:///var/run/docker.sock` when none exists (no address when
//!   every one that exists was skipped). The two
//!   environment variables keep the Docker CLI's order and beat the file, as every environment
//!   variable does in sandguard. The file's `host` beats `currentContext`: it was written for
//!   sandguard on purpose, while `currentContext` is the Docker CLI's ambient state (and is
//!   what a user without a `host` key gets, which is the case contexts are for). A context,
//!   current or named, beats every socket: it is what the user's own `docker` talks to, and
//!   the desktop engines make their context current when they start.
//! - Resolution always ends in an address and what chose it ([`DockerHost::via`], printed by
//!   `sandguard providers`); [`Origin`] says whether something named it, a socket was found,
//!   or nothing was (the Docker driver is then not configured unless `enabled = true`).
//! - The context named `default` is no context: the next source applies (the file's `host`,
//!   else the sockets), as the Docker CLI's `default` context is its non-context
//!   configuration.
//! - A context that cannot be followed (its `meta.json` missing or unreadable, not JSON, or
//!   without `Endpoints.docker.Host`), or a `config.json` that exists but cannot be read, is
//!   an error naming the context and the file. It is not a configuration error of sandguard
//!   as a whole (cloud providers still work): the Docker driver reports it on every use and
//!   `--docker-proxy` refuses to start. Never a silent fall back to a socket.
//! - A context with TLS material (`contexts/tls/<sha256 of N>/docker/`, what `docker context
//!   create --docker "…,ca=…,cert=…,key=…"` stores) is refused, naming the context and that
//!   directory: sandguard's Docker client speaks no TLS yet, and speaking plain HTTP to a TLS
//!   port fails with an answer nobody can read. `ssh://` endpoints are used as they are, and the
//!   driver refuses the scheme, naming it.
//! - What `DOCKER_HOST`, a context or the file's `host` names is used as it is: it is the
//!   user's choice, made on purpose, and is not second-guessed by the checks that discovery
//!   makes of the sockets it finds ([`sockets`]: owned by the user or root, in a directory
//!   others cannot write). Discovery is a guess on the user's behalf, so it only guesses what
//!   no other user could have planted; an explicit address is not a guess.
//! - The address is a [`DaemonAddress`], which prints only redacted (`address.rs`): a password
//!   in `DOCKER_HOST` (`tcp://user:PW@host`) never reaches output, a log or the ledger.

mod address;
pub(crate) mod sockets;

pub(crate) use address::DaemonAddress;

use std::path::{Path, PathBuf};

use super::Env;

/// The socket a Docker daemon listens on when nothing says otherwise.
pub(crate) const DEFAULT_SOCKET: &str = "/var/run/docker.sock";
/// [`DEFAULT_SOCKET`] as an address.
pub(crate) const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// The daemon's address and what chose it.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerHost {
    /// `unix:///path` or `tcp://host:port`; `Err`: the source could not be followed (or every
    /// socket found was skipped), and why.
    pub address: Result<DaemonAddress, HostError>,
    /// What chose it, for messages: `DOCKER_HOST`, `context "colima" (DOCKER_CONTEXT)`,
    /// `Colima's socket, the first engine socket found …`, …
    pub via: String,
    pub origin: Origin,
}

/// Why there is no address to use: the Docker context that names the daemon (or the Docker
/// CLI's config file that names the current one) cannot be followed, or every engine socket
/// found was skipped; see the module docs. The causes (an I/O or JSON error) are kept as their
/// text: a [`DockerHost`] is cloned and compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// Neither `DOCKER_CONFIG` nor `HOME` says where the contexts are.
    #[error(
        "Docker context {name:?} ({by}) cannot be found: neither DOCKER_CONFIG nor HOME is set"
    )]
    Unfound { name: String, by: String },
    /// The context's `meta.json` cannot be used.
    #[error("Docker context {name:?} ({by}): {}: {problem}", meta.display())]
    Meta {
        name: String,
        by: String,
        meta: PathBuf,
        problem: MetaProblem,
    },
    /// The context has TLS material, which sandguard's client cannot speak.
    #[error(
        "Docker context {name:?} ({by}) connects with TLS (its certificates are in {}), which \
         sandguard cannot speak yet: set DOCKER_HOST to a unix socket or a plain tcp:// address \
         of the same daemon",
        tls.display()
    )]
    Tls {
        name: String,
        by: String,
        tls: PathBuf,
    },
    /// The Docker CLI's `config.json` exists but cannot be read.
    #[error(
        "the Docker CLI's config file cannot be used to find the current context: cannot read \
         {}: {detail}",
        file.display()
    )]
    ConfigUnreadable { file: PathBuf, detail: String },
    /// The Docker CLI's `config.json` is not JSON.
    #[error(
        "the Docker CLI's config file cannot be used to find the current context: {}: not \
         JSON: {detail}",
        file.display()
    )]
    ConfigNotJson { file: PathBuf, detail: String },
    /// Nothing named a daemon, and every engine socket that exists was skipped: another user
    /// could have made it ([`sockets`]).
    #[error(
        "no engine socket found is safe to use: skipped as unsafe: {}; set DOCKER_HOST to use \
         one anyway",
        sockets::listed(.0)
    )]
    Untrusted(Vec<sockets::Skipped>),
}

/// What is wrong with a context's `meta.json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaProblem {
    #[error("no such context (the file does not exist)")]
    Missing,
    #[error("cannot read it: {0}")]
    Unreadable(String),
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("the context names no Docker endpoint (no Endpoints.docker.Host)")]
    NoEndpoint,
}

/// How the address was arrived at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `DOCKER_HOST`, a Docker context or `[providers.docker] host` named it.
    Named,
    /// An engine's socket that exists ([`sockets::search`]).
    Found,
    /// Nothing named a daemon, and every engine socket that exists was skipped
    /// ([`HostError::Untrusted`] says which and why): there is no address, and the driver
    /// fails every use with that error.
    Untrusted,
    /// Nothing named a daemon and no engine socket exists at any of `looked`: the default
    /// address, which nothing listens on.
    Default { looked: Vec<PathBuf> },
}

/// The daemon sandguard talks to, on the platform this binary was built for.
pub(crate) fn resolve(file_host: Option<String>, env: &dyn Env) -> DockerHost {
    resolve_on(crate::unix::PLATFORM, file_host, env)
}

/// The daemon sandguard talks to on `platform`: what names one, else the first engine socket
/// that exists, else the default address.
pub(crate) fn resolve_on(
    platform: sockets::Platform,
    file_host: Option<String>,
    env: &dyn Env,
) -> DockerHost {
    named(file_host, env).unwrap_or_else(|| sockets::search(&sockets::candidates(platform, env)))
}

/// The daemon `DOCKER_HOST`, a context or the file's `host` names; `None` when none does.
fn named(file_host: Option<String>, env: &dyn Env) -> Option<DockerHost> {
    if let Some(host) = env.var("DOCKER_HOST") {
        return Some(DockerHost {
            address: Ok(DaemonAddress::new(host)),
            via: "DOCKER_HOST".into(),
            origin: Origin::Named,
        });
    }
    if let Some(name) = env.var("DOCKER_CONTEXT") {
        if name != "default" {
            let dir = config_dir(env);
            return Some(follow(&name, "DOCKER_CONTEXT", dir.as_deref()));
        }
    }
    if let Some(host) = file_host {
        return Some(DockerHost {
            address: Ok(DaemonAddress::new(host)),
            via: "[providers.docker] host".into(),
            origin: Origin::Named,
        });
    }
    let dir = config_dir(env)?;
    let file = dir.join("config.json");
    let current = match std::fs::read(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => Err(HostError::ConfigUnreadable {
            file: file.clone(),
            detail: e.to_string(),
        }),
        Ok(bytes) => current_context(&bytes).map_err(|e| HostError::ConfigNotJson {
            file: file.clone(),
            detail: e.to_string(),
        }),
    };
    match current {
        Ok(None) => None,
        Ok(Some(name)) if name == "default" => None,
        Ok(Some(name)) => Some(follow(
            &name,
            &format!("currentContext in {}", file.display()),
            Some(&dir),
        )),
        Err(error) => Some(DockerHost {
            address: Err(error),
            via: file.display().to_string(),
            origin: Origin::Named,
        }),
    }
}

/// The Docker CLI's config directory: `$DOCKER_CONFIG`, else `~/.docker`; `None` without
/// either (no `HOME`).
fn config_dir(env: &dyn Env) -> Option<PathBuf> {
    env.var("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| env.var("HOME").map(|h| Path::new(&h).join(".docker")))
}

/// `currentContext` of a `config.json`, if it names one.
fn current_context(bytes: &[u8]) -> Result<Option<String>, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_slice(bytes)?;
    Ok(value
        .get("currentContext")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string))
}

/// The endpoint of the context `name`, named by `by`.
fn follow(name: &str, by: &str, dir: Option<&Path>) -> DockerHost {
    let via = format!("context {name:?} ({by})");
    let (name, by) = (name.to_string(), by.to_string());
    let address = match dir {
        None => Err(HostError::Unfound { name, by }),
        Some(dir) => {
            let meta = meta_path(dir, &name);
            let tls = context_dir(dir, "tls", &name).join("docker");
            match read_endpoint(&meta) {
                Err(problem) => Err(HostError::Meta {
                    name,
                    by,
                    meta,
                    problem,
                }),
                Ok(_) if tls.exists() => Err(HostError::Tls { name, by, tls }),
                Ok(host) => Ok(DaemonAddress::new(host)),
            }
        }
    };
    DockerHost {
        address,
        via,
        origin: Origin::Named,
    }
}

/// `<dir>/contexts/meta/<sha256(name)>/meta.json`.
pub(crate) fn meta_path(dir: &Path, name: &str) -> PathBuf {
    context_dir(dir, "meta", name).join("meta.json")
}

/// `<dir>/contexts/<store>/<sha256(name)>`: where the Docker CLI keeps a context's `meta` and
/// its `tls` material.
fn context_dir(dir: &Path, store: &str, name: &str) -> PathBuf {
    let digest = ring::digest::digest(&ring::digest::SHA256, name.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    dir.join("contexts").join(store).join(hex)
}

fn read_endpoint(meta: &Path) -> Result<String, MetaProblem> {
    let bytes = std::fs::read(meta).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => MetaProblem::Missing,
        _ => MetaProblem::Unreadable(e.to_string()),
    })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| MetaProblem::NotJson(e.to_string()))?;
    value
        .pointer("/Endpoints/docker/Host")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or(MetaProblem::NoEndpoint)
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

    fn context(dir: &Path, name: &str, meta: &str) {
        let path = meta_path(dir, name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, meta).unwrap();
    }

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sg-dctx-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_meta_directory_is_the_sha256_of_the_name() {
        // As `docker context create` lays it out: sha256("default") is 37a8eec1….
        let p = meta_path(Path::new("/d"), "default");
        assert!(p.to_str().unwrap().starts_with(
            "/d/contexts/meta/37a8eec1ce19687d132fe29051dca629d164e2c4958ba141d5f4133a33f0688f/"
        ));
    }

    #[test]
    fn precedence_host_context_file_current_default() {
        let dir = scratch("prec");
        let d = dir.to_str().unwrap();
        context(
            &dir,
            "env",
            r#"{"Endpoints":{"docker":{"Host":"unix:///env.sock"}}}"#,
        );
        context(
            &dir,
            "cur",
            r#"{"Endpoints":{"docker":{"Host":"unix:///cur.sock"}}}"#,
        );
        std::fs::write(dir.join("config.json"), r#"{"currentContext":"cur"}"#).unwrap();
        let file = || Some("unix:///file.sock".to_string());
        let addr = |h: Option<DockerHost>| h.map(|h| h.address.unwrap().expose().to_string());
        let all = env(&[
            ("DOCKER_HOST", "unix:///host.sock"),
            ("DOCKER_CONTEXT", "env"),
            ("DOCKER_CONFIG", d),
        ]);
        assert_eq!(addr(named(file(), &all)).unwrap(), "unix:///host.sock");
        let ctx = env(&[("DOCKER_CONTEXT", "env"), ("DOCKER_CONFIG", d)]);
        assert_eq!(addr(named(file(), &ctx)).unwrap(), "unix:///env.sock");
        let cur = env(&[("DOCKER_CONFIG", d)]);
        assert_eq!(addr(named(file(), &cur)).unwrap(), "unix:///file.sock");
        let found = named(None, &cur).unwrap();
        assert_eq!(found.address.unwrap().expose(), "unix:///cur.sock");
        assert!(found.via.contains("currentContext"), "{}", found.via);
        // `default` is no context.
        let default = env(&[("DOCKER_CONTEXT", "default"), ("DOCKER_CONFIG", d)]);
        assert_eq!(addr(named(file(), &default)).unwrap(), "unix:///file.sock");
        std::fs::write(dir.join("config.json"), r#"{"currentContext":"default"}"#).unwrap();
        assert_eq!(named(None, &cur), None);
        std::fs::remove_file(dir.join("config.json")).unwrap();
        assert_eq!(named(None, &cur), None);
        // ~/.docker without DOCKER_CONFIG.
        std::fs::create_dir_all(dir.join(".docker")).unwrap();
        context(
            &dir.join(".docker"),
            "home",
            r#"{"Endpoints":{"docker":{"Host":"tcp://127.0.0.1:1"}}}"#,
        );
        let home = env(&[("HOME", d), ("DOCKER_CONTEXT", "home")]);
        assert_eq!(addr(named(None, &home)).unwrap(), "tcp://127.0.0.1:1");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn contexts_that_cannot_be_followed_are_errors_naming_context_and_file() {
        let dir = scratch("bad");
        let d = dir.to_str().unwrap();
        context(&dir, "k8s", r#"{"Endpoints":{"kubernetes":{}}}"#);
        context(&dir, "junk", "{");
        for (name, why) in [
            ("missing", "does not exist"),
            ("k8s", "no Docker endpoint"),
            ("junk", "not JSON"),
        ] {
            let e = named(
                None,
                &env(&[("DOCKER_CONTEXT", name), ("DOCKER_CONFIG", d)]),
            )
            .unwrap()
            .address
            .unwrap_err()
            .to_string();
            assert!(e.contains(&format!("{name:?}")), "{e}");
            assert!(
                e.contains(&meta_path(&dir, name).display().to_string()),
                "{e}"
            );
            assert!(e.contains(why), "{e}");
        }
        std::fs::write(dir.join("config.json"), "not json").unwrap();
        let e = named(None, &env(&[("DOCKER_CONFIG", d)]))
            .unwrap()
            .address
            .unwrap_err()
            .to_string();
        assert!(e.contains("config.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A fake Mac whose every engine socket is live: `DOCKER_HOST`, `DOCKER_CONTEXT`, the
    /// file's `host` and `currentContext` each still win; with none of them (or the `default`
    /// context) the first socket of the order does.
    #[test]
    fn docker_host_and_contexts_beat_every_socket() {
        use sockets::tests::FakeMac;
        use sockets::Platform;
        let mac = FakeMac::new("beat");
        let list = mac.list();
        let _listeners: Vec<_> = list.iter().map(|c| FakeMac::bind(&c.path)).collect();
        let docker = mac.root.join("home/.docker");
        context(
            &docker,
            "cur",
            r#"{"Endpoints":{"docker":{"Host":"unix:///cur.sock"}}}"#,
        );
        context(
            &docker,
            "env",
            r#"{"Endpoints":{"docker":{"Host":"unix:///env.sock"}}}"#,
        );
        let with = |pairs: &[(&str, &str)]| {
            let mut e = mac.env.clone();
            e.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            e
        };
        let on_mac = |file: Option<&str>, env: &HashMap<String, String>| {
            let host = resolve_on(Platform::MacOs, file.map(str::to_string), env);
            (host.address.unwrap().expose().to_string(), host.origin)
        };
        let desktop = format!("unix://{}", list[0].path.display());
        assert_eq!(on_mac(None, &mac.env), (desktop.clone(), Origin::Found));
        let default = with(&[("DOCKER_CONTEXT", "default")]);
        assert_eq!(on_mac(None, &default).0, desktop);

        std::fs::write(docker.join("config.json"), r#"{"currentContext":"cur"}"#).unwrap();
        assert_eq!(
            on_mac(None, &mac.env),
            ("unix:///cur.sock".into(), Origin::Named)
        );
        assert_eq!(
            on_mac(Some("unix:///file.sock"), &mac.env).0,
            "unix:///file.sock"
        );
        let ctx = with(&[("DOCKER_CONTEXT", "env")]);
        assert_eq!(
            on_mac(Some("unix:///file.sock"), &ctx).0,
            "unix:///env.sock"
        );
        let host = with(&[("DOCKER_CONTEXT", "env"), ("DOCKER_HOST", "tcp://h:1")]);
        assert_eq!(on_mac(Some("unix:///file.sock"), &host).0, "tcp://h:1");
    }
}
