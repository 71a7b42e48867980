//! The registry: every provider sandguard knows, built once from settings (the built-in
//! drivers, then the plugins found on `PATH` or named in the config), configured or not.

use std::sync::Arc;

use super::{daytona, docker, e2b, flyio, modal, plugin, tenki, Provider};
use crate::config::Settings;

/// One registered provider, configured or not.
#[derive(Clone)]
pub(crate) struct Entry {
    pub name: &'static str,
    pub state: EntryState,
}

#[derive(Clone)]
pub(crate) enum EntryState {
    Configured(Arc<dyn Provider>),
    /// Not configured, and why (which variable or key would configure it).
    Unconfigured(String),
}

/// Every provider sandguard knows, built once from settings.
#[derive(Clone)]
pub(crate) struct Registry {
    entries: Vec<Entry>,
}

/// Why `--provider NAME` cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SelectError {
    #[error(transparent)]
    Unknown(#[from] UnknownProvider),
    #[error(transparent)]
    Unconfigured(#[from] UnconfiguredProvider),
}

/// `--provider NAME` named a provider sandguard knows but that is not configured: asked for by
/// name, it is an error (exit 2), never an empty answer that reads as "nothing there".
#[derive(Debug, thiserror::Error)]
#[error(
    "provider {name:?} is not configured: {why}; `sandguard providers` shows what each provider \
     needs"
)]
pub(crate) struct UnconfiguredProvider {
    pub name: String,
    /// Which variable or key would configure it.
    pub why: String,
}

/// `--provider NAME` named no registered provider.
#[derive(Debug, thiserror::Error)]
#[error("unknown provider {name:?}; known providers: {}", known.join(", "))]
pub(crate) struct UnknownProvider {
    pub name: String,
    pub known: Vec<String>,
}

impl Registry {
    /// Registers every built-in driver, configured from `settings`, then the plugins (on
    /// `PATH` or in the config), which may not take a built-in's name.
    pub(crate) fn from_settings(settings: &Settings) -> Registry {
        let mut entries = vec![
            docker::entry(&settings.docker),
            e2b::entry(&settings.e2b),
            flyio::entry(&settings.flyio),
            daytona::entry(&settings.daytona),
            tenki::entry(&settings.tenki),
            modal::entry(&settings.modal, settings.modal_environment.as_deref()),
        ];
        let path = std::env::var_os("PATH");
        // A plugin inherits sandguard's environment, credentials included: whatever it says
        // is redacted of every one of them.
        let secrets: Vec<crate::config::Secret> = [
            &settings.e2b,
            &settings.daytona,
            &settings.flyio,
            &settings.tenki,
            &settings.modal,
        ]
        .iter()
        .flat_map(|c| c.token.iter().chain(c.secret.iter()))
        .cloned()
        .collect();
        entries.extend(plugin::entries(
            &settings.plugins,
            path.as_deref(),
            &crate::config::BUILT_IN_PROVIDERS,
            &secrets,
        ));
        Registry { entries }
    }

    /// A registry of the given entries (tests).
    #[cfg(test)]
    pub(crate) fn from_entries(entries: Vec<Entry>) -> Registry {
        Registry { entries }
    }

    pub(crate) fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The configured providers, all of them or the one named. Without a name the
    /// unconfigured ones are skipped; a name that is unknown, or known but not configured, is
    /// an error.
    pub(crate) fn select(&self, only: Option<&str>) -> Result<Vec<Arc<dyn Provider>>, SelectError> {
        if let Some(name) = only {
            match self.entries.iter().find(|e| e.name == name) {
                None => {
                    return Err(UnknownProvider {
                        name: name.to_string(),
                        known: self.entries.iter().map(|e| e.name.to_string()).collect(),
                    }
                    .into())
                }
                Some(Entry {
                    state: EntryState::Unconfigured(why),
                    ..
                }) => {
                    return Err(UnconfiguredProvider {
                        name: name.to_string(),
                        why: why.clone(),
                    }
                    .into())
                }
                Some(_) => {}
            }
        }
        Ok(self
            .entries
            .iter()
            .filter(|e| only.is_none_or(|n| n == e.name))
            .filter_map(|e| match &e.state {
                EntryState::Configured(p) => Some(p.clone()),
                EntryState::Unconfigured(_) => None,
            })
            .collect())
    }

    /// The configured provider called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<dyn Provider>> {
        self.select(Some(name)).ok()?.into_iter().next()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn select_knows_unknown_from_unconfigured() {
        let reg = Registry::from_entries(vec![Entry {
            name: "docker",
            state: EntryState::Unconfigured("no socket".into()),
        }]);
        assert!(reg.select(None).unwrap().is_empty());
        let Err(SelectError::Unconfigured(err)) = reg.select(Some("docker")) else {
            panic!("docker is known but not configured")
        };
        assert!(err.to_string().contains("no socket"), "{err}");
        let Err(SelectError::Unknown(err)) = reg.select(Some("dokker")) else {
            panic!("dokker should be unknown")
        };
        assert_eq!(
            err.to_string(),
            "unknown provider \"dokker\"; known providers: docker"
        );
    }
}
