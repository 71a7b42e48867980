//! Where the Docker daemon is: `DOCKER_HOST`, the Docker CLI's contexts, the config file, or
//! the default socket, resolved once for the Docker driver and the `--docker-proxy` upstream
//! alike.
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
//!   `currentContext` in the Docker CLI's `config.json` > `unix:///var/run/docker.sock`. The two
//!   environment variables keep the Docker CLI's order and beat the file, as every environment
//!   variable does in sandguard. The file's `host` beats `currentContext`: it was written for
//!   sandguard on purpose, while `currentContext` is the Docker CLI's ambient state (and is
//!   what a user without a `host` key gets, which is the case contexts are for).
//! - The context named `default` is no context: the next source applies (the file's `host`,
//!   else the default socket), as the Docker CLI's `default` context is its non-context
//!   configuration.
//! - A context that cannot be followed (its `meta.json` missing or unreadable, not JSON, or
//!   without `Endpoints.docker.Host`), or a `config.json` that exists but cannot be read, is
//!   an error naming the context and the file. It is not a configuration error of sandguard
//!   as a whole (cloud providers still work): the Docker driver reports it on every use and
//!   `--docker-proxy` refuses to start. Never a silent fall back to the default socket.
//! - A context with TLS material (`contexts/tls/<sha256 of N>/docker/`, what `docker context
//!   create --docker "…,ca=…,cert=…,key=…"` stores) is refused, naming the context and that
//!   directory: sandguard's Docker client speaks no TLS yet, and speaking plain HTTP to a TLS
//!   port fails with an answer nobody can read. `ssh://` endpoints are used as they are, and the
//!   driver refuses the scheme, naming it.

use std::path::{Path, PathBuf};

use super::Env;

/// The daemon's address and what chose it.
#[derive(Debug, Clone, PartialEq)]
pub struct DockerHost {
    /// `unix:///path` or `tcp://host:port`; `Err`: the source could not be followed, and why.
    pub address: Result<String, String>,
    /// What chose it, for messages: `DOCKER_HOST`, `context "colima" (DOCKER_CONTEXT)`, …
    pub via: String,
}

/// The daemon sandguard talks to; `None` when nothing names one (the default socket then).
pub(crate) fn resolve(file_host: Option<String>, env: &dyn Env) -> Option<DockerHost> {
    if let Some(host) = env.var("DOCKER_HOST") {
        return Some(DockerHost {
            address: Ok(host),
            via: "DOCKER_HOST".into(),
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
            address: Ok(host),
            via: "[providers.docker] host".into(),
        });
    }
    let dir = config_dir(env)?;
    let file = dir.join("config.json");
    let current = match std::fs::read(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => Err(format!("cannot read {}: {e}", file.display())),
        Ok(bytes) => current_context(&bytes).map_err(|e| format!("{}: {e}", file.display())),
    };
    match current {
        Ok(None) => None,
        Ok(Some(name)) if name == "default" => None,
        Ok(Some(name)) => Some(follow(
            &name,
            &format!("currentContext in {}", file.display()),
            Some(&dir),
        )),
        Err(message) => Some(DockerHost {
            address: Err(format!(
                "the Docker CLI's config file cannot be used to find the current context: \
                 {message}"
            )),
            via: file.display().to_string(),
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
fn current_context(bytes: &[u8]) -> Result<Option<String>, String> {
    let value: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    Ok(value
        .get("currentContext")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string))
}

/// The endpoint of the context `name`, named by `by`.
fn follow(name: &str, by: &str, dir: Option<&Path>) -> DockerHost {
    let via = format!("context {name:?} ({by})");
    let address = match dir {
        None => Err(format!(
            "Docker context {name:?} ({by}) cannot be found: neither DOCKER_CONFIG nor HOME is \
             set"
        )),
        Some(dir) => {
            let meta = meta_path(dir, name);
            let tls = context_dir(dir, "tls", name).join("docker");
            read_endpoint(&meta)
                .map_err(|e| format!("Docker context {name:?} ({by}): {}: {e}", meta.display()))
                .and_then(|host| match tls.exists() {
                    false => Ok(host),
                    true => Err(format!(
                        "Docker context {name:?} ({by}) connects with TLS (its certificates \
                         are in {}), which sandguard cannot speak yet: set DOCKER_HOST to a \
                         unix socket or a plain tcp:// address of the same daemon",
                        tls.display()
                    )),
                })
        }
    };
    DockerHost { address, via }
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

fn read_endpoint(meta: &Path) -> Result<String, String> {
    let bytes = std::fs::read(meta).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => "no such context (the file does not exist)".to_string(),
        _ => format!("cannot read it: {e}"),
    })?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("not JSON: {e}"))?;
    value
        .pointer("/Endpoints/docker/Host")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| "the context names no Docker endpoint (no Endpoints.docker.Host)".into())
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
        let addr = |h: Option<DockerHost>| h.map(|h| h.address.unwrap());
        let all = env(&[
            ("DOCKER_HOST", "unix:///host.sock"),
            ("DOCKER_CONTEXT", "env"),
            ("DOCKER_CONFIG", d),
        ]);
        assert_eq!(addr(resolve(file(), &all)).unwrap(), "unix:///host.sock");
        let ctx = env(&[("DOCKER_CONTEXT", "env"), ("DOCKER_CONFIG", d)]);
        assert_eq!(addr(resolve(file(), &ctx)).unwrap(), "unix:///env.sock");
        let cur = env(&[("DOCKER_CONFIG", d)]);
        assert_eq!(addr(resolve(file(), &cur)).unwrap(), "unix:///file.sock");
        let found = resolve(None, &cur).unwrap();
        assert_eq!(found.address.unwrap(), "unix:///cur.sock");
        assert!(found.via.contains("currentContext"), "{}", found.via);
        // `default` is no context.
        let default = env(&[("DOCKER_CONTEXT", "default"), ("DOCKER_CONFIG", d)]);
        assert_eq!(
            addr(resolve(file(), &default)).unwrap(),
            "unix:///file.sock"
        );
        std::fs::write(dir.join("config.json"), r#"{"currentContext":"default"}"#).unwrap();
        assert_eq!(resolve(None, &cur), None);
        std::fs::remove_file(dir.join("config.json")).unwrap();
        assert_eq!(resolve(None, &cur), None);
        // ~/.docker without DOCKER_CONFIG.
        std::fs::create_dir_all(dir.join(".docker")).unwrap();
        context(
            &dir.join(".docker"),
            "home",
            r#"{"Endpoints":{"docker":{"Host":"tcp://127.0.0.1:1"}}}"#,
        );
        let home = env(&[("HOME", d), ("DOCKER_CONTEXT", "home")]);
        assert_eq!(addr(resolve(None, &home)).unwrap(), "tcp://127.0.0.1:1");
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
            let e = resolve(
                None,
                &env(&[("DOCKER_CONTEXT", name), ("DOCKER_CONFIG", d)]),
            )
            .unwrap()
            .address
            .unwrap_err();
            assert!(e.contains(&format!("{name:?}")), "{e}");
            assert!(
                e.contains(&meta_path(&dir, name).display().to_string()),
                "{e}"
            );
            assert!(e.contains(why), "{e}");
        }
        std::fs::write(dir.join("config.json"), "not json").unwrap();
        let e = resolve(None, &env(&[("DOCKER_CONFIG", d)]))
            .unwrap()
            .address
            .unwrap_err();
        assert!(e.contains("config.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
