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

mod discover;
mod process;
mod wire;

use std::ffi::OsString;
use std::sync::Mutex;
use std::time::Duration;

use self::wire::{Answer, Described, Did, Done, ListReply};
use super::{Capabilities, Provider, ProviderError, Sandbox};
use crate::config::Secret;
use crate::labels::Selector;

#[cfg(test)]
use discover::discover;
pub(crate) use discover::entries;

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

/// One plugin provider.
pub(crate) struct Plugin {
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
    pub(crate) fn new(name: &str, command: Vec<OsString>, timeout: Duration) -> Plugin {
        Plugin {
            name: name.to_string(),
            command,
            timeout,
            described: Mutex::new(None),
            secrets: Vec::new(),
        }
    }

    /// Also redacts `secrets` from everything the plugin says.
    pub(crate) fn redacting(mut self, secrets: Vec<Secret>) -> Self {
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
