//! Plugin providers: an executable that speaks JSON over stdin and stdout, found as
//! `sandguard-provider-NAME` on `PATH` or named by `[providers.NAME] command` in the config,
//! joins the registry as provider `NAME`, so `ps`, `stop`, `sweep` and reclaim use it exactly
//! like a built-in driver.
//!
//! One process per call: `COMMAND… VERB` with one JSON request on stdin and one JSON reply
//! expected on stdout (verbs `list`, `remove`, `renew`, `describe`; README.md, "Plugin
//! providers", is the contract, and [`wire`] holds the messages and the rules that turn an
//! answer into a reply or an error). Each call runs in its own process group with a time limit;
//! at the limit the whole group is killed. A plugin that crashes, hangs or prints garbage fails
//! that call, and only that call: it is reported like any provider that does not answer.
//!
//! Everything a plugin says that sandguard passes on (its stderr and error replies in errors
//! and logs, and from there the ledger; a sandbox's `status` and `image` and the `describe`
//! detail in output) goes through the HTTP layer's redaction ([`super::redact`]): the
//! credentials sandguard knows, which the plugin inherits in its environment, and anything
//! shaped like a credential. Decision: a sandbox's id and labels are not redacted; they are
//! how sandguard matches and removes it, and must come back to the plugin as it sent them.
//!
//! A listed id is read by the plugin's id parser (the generic shape, [`super::ids::GENERIC`])
//! like any claimed one: one it refuses (empty, `..`, with a `/` or a space, starting with
//! `-`, …) is dropped from the listing with a warning and never removed, while the rest of
//! the listing stands. Decision: dropped, not a failed listing, so one odd entry cannot hide a
//! session's other sandboxes from its reclaim.

mod wire;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Child;

use self::wire::{Answer, Described, Did, Done, ListReply};
use super::{Capabilities, Entry, EntryState, Provider, ProviderError, Sandbox};
use crate::config::{PluginSettings, Secret};
use crate::labels::Selector;

/// A plugin on `PATH` is this prefix followed by its provider name.
pub const PREFIX: &str = "sandguard-provider-";

/// The protocol version, in the plugin's environment as `SANDGUARD_PLUGIN_PROTOCOL`.
const PROTOCOL: &str = "1";

/// A reply larger than this is refused (the rest of stdout is read and discarded).
const MAX_REPLY: usize = 16 << 20;

/// How much of a plugin's stderr is kept for error messages.
const MAX_STDERR: usize = 64 << 10;

/// Until `describe` has answered, a plugin is taken to have labels and a TTL: the sidecar picks
/// its TTL keepers at start, and [`Plugin::renew`] asks `describe` before renewing anything.
const PROVISIONAL: Capabilities = Capabilities {
    labels: true,
    ttl: true,
    pagination: false,
};

/// What a plugin that does not answer `describe` can do: labels, no TTL.
const UNDESCRIBED: Capabilities = Capabilities {
    labels: true,
    ttl: false,
    pagination: false,
};

/// The registry entries of every plugin: those on `path` (a `PATH` value) and those in the
/// config; a config `command` wins over `PATH`. A name in `reserved` (the built-ins) is ignored
/// with a warning. Sorted by name. `secrets` (every credential sandguard knows) are redacted
/// from whatever the plugins say.
pub fn entries(
    configured: &[PluginSettings],
    path: Option<&OsStr>,
    reserved: &[&str],
    secrets: &[Secret],
) -> Vec<Entry> {
    let found = discover(path);
    let mut names: Vec<&str> = found.keys().map(String::as_str).collect();
    names.extend(configured.iter().map(|p| p.name.as_str()));
    names.sort_unstable();
    names.dedup();
    let mut entries = Vec::new();
    for name in names {
        if reserved.contains(&name) {
            tracing::warn!(
                "ignoring the plugin {}: {name:?} is a built-in provider",
                found
                    .get(name)
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            );
            continue;
        }
        let settings = configured.iter().find(|p| p.name == name);
        let command: Option<Vec<OsString>> = settings
            .and_then(|s| s.command.as_ref())
            .map(|c| c.iter().map(OsString::from).collect())
            .or_else(|| found.get(name).map(|p| vec![p.clone().into_os_string()]));
        let timeout = settings.map_or(Duration::from_secs(30), |s| s.timeout);
        let state = match command {
            Some(command) => EntryState::Configured(Arc::new(
                Plugin::new(name, command, timeout).redacting(secrets.to_vec()),
            )),
            None => EntryState::Unconfigured(format!(
                "[providers.{name}] has no `command` and there is no {PREFIX}{name} on PATH"
            )),
        };
        // The registry is built once per process and its names live as long; leaking these
        // few bytes keeps `Entry::name` a plain `&'static str` for the built-ins.
        let name: &'static str = Box::leak(name.to_string().into_boxed_str());
        entries.push(Entry { name, state });
    }
    entries
}

/// Every `sandguard-provider-NAME` on `path`: executable regular files (symlinks followed) in
/// absolute directories, the first of each name winning as in a shell's lookup. A name that
/// is not a valid provider name is skipped.
pub fn discover(path: Option<&OsStr>) -> BTreeMap<String, PathBuf> {
    let mut found = BTreeMap::new();
    let Some(path) = path else { return found };
    for dir in std::env::split_paths(path).filter(|d| d.is_absolute()) {
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        for item in listing.flatten() {
            let file_name = item.file_name();
            let Some(name) = file_name.to_str().and_then(|n| n.strip_prefix(PREFIX)) else {
                continue;
            };
            if !crate::protocol::valid_provider(name) || found.contains_key(name) {
                continue;
            }
            let path = item.path();
            let executable = std::fs::metadata(&path)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if executable {
                found.insert(name.to_string(), path);
            }
        }
    }
    found
}

/// One plugin provider.
pub struct Plugin {
    name: String,
    /// The program and its leading arguments; the verb is appended.
    command: Vec<OsString>,
    timeout: Duration,
    /// What `describe` said, once it has answered.
    described: Mutex<Option<Capabilities>>,
    /// Credentials to hide in what the plugin says (beside anything shaped like one).
    secrets: Vec<Secret>,
}

impl Plugin {
    pub fn new(name: &str, command: Vec<OsString>, timeout: Duration) -> Plugin {
        Plugin {
            name: name.to_string(),
            command,
            timeout,
            described: Mutex::new(None),
            secrets: Vec::new(),
        }
    }

    /// Also redacts `secrets` from everything the plugin says.
    pub fn redacting(mut self, secrets: Vec<Secret>) -> Self {
        self.secrets.extend(secrets);
        self
    }

    fn redact(&self, text: &str) -> String {
        super::redact::redact(text, &self.secrets)
    }

    fn interpret<T: serde::de::DeserializeOwned>(
        &self,
        answer: &Answer,
        what: &str,
    ) -> Result<T, ProviderError> {
        wire::interpret(answer, what, &self.program(), &self.secrets)
    }

    fn program(&self) -> String {
        self.command
            .first()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    fn remember(&self, capabilities: Capabilities) {
        *self
            .described
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(capabilities);
    }

    fn known_capabilities(&self) -> Option<Capabilities> {
        *self
            .described
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `COMMAND… verb` with `request` on stdin and collects its answer, killing the
    /// plugin's whole process group at the time limit.
    async fn call(&self, verb: &str, request: serde_json::Value) -> Result<Answer, ProviderError> {
        let program = self.program();
        let mut body = request.to_string().into_bytes();
        body.push(b'\n');
        let Some((executable, args)) = self.command.split_first() else {
            return Err(ProviderError::fatal(format!(
                "plugin {} has no command",
                self.name
            )));
        };
        let mut child = tokio::process::Command::new(executable)
            .args(args)
            .arg(verb)
            .env("SANDGUARD_PLUGIN_PROTOCOL", PROTOCOL)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0)
            .spawn()
            .map_err(|e| ProviderError::fatal(format!("cannot run plugin {program}: {e}")))?;
        let group = child.id();
        match tokio::time::timeout(self.timeout, exchange(&mut child, body)).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(ProviderError::transient(format!(
                "cannot talk to plugin {program}: {e}"
            ))),
            Err(_) => {
                // The leader is not reaped yet (its wait never returned), so the group id
                // cannot have been reused.
                if let Some(group) = group {
                    if let Err(e) = crate::unix::kill_process_group(group) {
                        tracing::warn!("cannot kill plugin {program} (group {group}): {e}");
                    }
                }
                let _ = child.start_kill();
                Err(ProviderError::transient(format!(
                    "plugin {program} did not answer `{verb}` within {:?}; killed it",
                    self.timeout
                )))
            }
        }
    }

    /// `None` when the plugin does not implement `describe` (it exits non-zero).
    async fn describe(&self) -> Result<Option<Described>, ProviderError> {
        let answer = self.call("describe", serde_json::json!({})).await?;
        if !answer.status.success() {
            tracing::debug!(
                "plugin {} has no describe: it {}",
                self.program(),
                wire::describe_status(answer.status)
            );
            return Ok(None);
        }
        self.interpret(&answer, "failed to describe the plugin")
            .map(Some)
    }
}

/// Writes the request, closes stdin, reads stdout and stderr to the end (keeping at most
/// their limits) and waits for the exit status, all at once so no pipe can fill and stall.
async fn exchange(child: &mut Child, body: Vec<u8>) -> std::io::Result<Answer> {
    let stdin = child.stdin.take();
    let write = async move {
        if let Some(mut stdin) = stdin {
            // A plugin that exits without reading its request is judged by its reply.
            let _ = stdin.write_all(&body).await;
        }
    };
    let (_, (stdout, stdout_truncated), (stderr, _)) = tokio::join!(
        write,
        read_capped(child.stdout.take(), MAX_REPLY),
        read_capped(child.stderr.take(), MAX_STDERR),
    );
    let status = child.wait().await?;
    Ok(Answer {
        status,
        stdout,
        stdout_truncated,
        stderr,
    })
}

/// Reads `reader` to its end, keeping the first `cap` bytes; `true` when more were discarded.
async fn read_capped(reader: Option<impl AsyncRead + Unpin>, cap: usize) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut truncated = false;
    let Some(mut reader) = reader else {
        return (kept, truncated);
    };
    let mut buf = vec![0u8; 16 << 10];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap - kept.len();
                truncated |= n > room;
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}

#[async_trait::async_trait]
impl Provider for Plugin {
    fn name(&self) -> &str {
        &self.name
    }

    fn capabilities(&self) -> Capabilities {
        self.known_capabilities().unwrap_or(PROVISIONAL)
    }

    async fn list(&self, selector: &Selector) -> Result<Vec<Sandbox>, ProviderError> {
        let what = "failed to list sandboxes";
        let answer = self
            .call("list", serde_json::json!({ "selector": selector.terms() }))
            .await?;
        let reply: ListReply = self.interpret(&answer, what)?;
        Ok(reply
            .sandboxes
            .into_iter()
            .filter(|l| match self.parse_claim(&l.id) {
                Ok(_) => true,
                Err(why) => {
                    tracing::warn!(
                        "plugin {} listed a sandbox sandguard will never remove: {why}",
                        self.program()
                    );
                    false
                }
            })
            .map(|l| {
                let mut sandbox = l.into_sandbox(&self.name);
                sandbox.status = self.redact(&sandbox.status);
                sandbox.image = sandbox.image.map(|i| self.redact(&i));
                sandbox
            })
            .collect())
    }

    async fn remove(&self, sandbox: &Sandbox) -> Result<(), ProviderError> {
        let what = format!("failed to remove sandbox {}", sandbox.id);
        let answer = self
            .call("remove", serde_json::json!({ "id": sandbox.id }))
            .await?;
        let done: Done = self.interpret(&answer, &what)?;
        match done.result {
            Did::Removed => Ok(()),
            Did::Gone => Err(ProviderError::gone(format!(
                "sandbox {} is gone",
                sandbox.id
            ))),
            Did::Renewed => Err(ProviderError::fatal(format!(
                "{what}: plugin {} answered `renewed` to `remove`",
                self.program()
            ))),
        }
    }

    /// `describe`, remembered for [`Provider::capabilities`]; a plugin without `describe` is
    /// checked by listing its managed sandboxes instead.
    async fn check(&self) -> Result<String, ProviderError> {
        match self.describe().await? {
            Some(described) => {
                self.remember(described.capabilities.into());
                Ok(described
                    .detail
                    .map_or_else(|| format!("plugin {}", self.program()), |d| self.redact(&d)))
            }
            None => {
                self.list(&Selector::managed()).await?;
                self.remember(UNDESCRIBED);
                Ok(format!("plugin {} (no describe)", self.program()))
            }
        }
    }

    async fn renew(&self, sandbox: &Sandbox, ttl: Duration) -> Result<(), ProviderError> {
        let capabilities = match self.known_capabilities() {
            Some(c) => c,
            None => {
                self.check().await?;
                self.capabilities()
            }
        };
        if !capabilities.ttl {
            return Ok(());
        }
        let what = format!("failed to extend sandbox {}", sandbox.id);
        let request = serde_json::json!({ "id": sandbox.id, "ttl_secs": ttl.as_secs() });
        let answer = self.call("renew", request).await?;
        let done: Done = self.interpret(&answer, &what)?;
        match done.result {
            Did::Renewed => Ok(()),
            Did::Gone => Err(ProviderError::gone(format!(
                "sandbox {} is gone",
                sandbox.id
            ))),
            Did::Removed => Err(ProviderError::fatal(format!(
                "{what}: plugin {} answered `removed` to `renew`",
                self.program()
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
