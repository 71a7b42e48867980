//! Finding plugins: every `sandguard-provider-NAME` on `PATH` ([`discover`]) and every
//! `[providers.NAME]` of the config, turned into registry entries ([`entries`]). A config
//! `command` wins over `PATH`; a built-in's name is refused with a warning.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::Plugin;
use crate::config::{PluginSettings, Secret};
use crate::providers::{Entry, EntryState};

/// A plugin on `PATH` is this prefix followed by its provider name.
pub(crate) const PREFIX: &str = "sandguard-provider-";

/// The registry entries of every plugin: those on `path` (a `PATH` value) and those in the
/// config; a config `command` wins over `PATH`. A name in `reserved` (the built-ins) is ignored
/// with a warning. Sorted by name. `secrets` (every credential sandguard knows) are redacted
/// from whatever the plugins say.
pub(crate) fn entries(
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
pub(crate) fn discover(path: Option<&OsStr>) -> BTreeMap<String, PathBuf> {
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
