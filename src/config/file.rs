//! The config file as written: one serde type per table, every table denying unknown keys (a
//! typo is an error, not a silent default), and errors that name the file, the line and the
//! key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

use super::cloud;
use super::values::{Concurrency, HumanDuration, LogLevel, Positive, Price, Rate, StatePath};
use super::ConfigError;
use crate::ledger::price::{Prices, ProviderPrices};

// The file as written. Every table denies unknown keys so a typo is an error, not a silent
// default.

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    pub(super) state_dir: Option<StatePath>,
    pub(super) log_level: Option<LogLevel>,
    #[serde(default)]
    pub(super) watch: FileWatch,
    #[serde(default)]
    pub(super) reclaim: FileReclaim,
    #[serde(default)]
    pub(super) sweep: FileSweep,
    #[serde(default)]
    pub(super) providers: FileProviders,
    #[serde(default)]
    pub(super) fleet: super::fleet::FileFleet,
    #[serde(default)]
    pub(super) host: super::fleet::FileHost,
    #[serde(default)]
    pub(super) limits: FileLimits,
    #[serde(default)]
    pub(super) notify: super::notify::FileNotify,
}

/// `[limits]`: per session, on what it creates through the proxies (`crate::budget`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimits {
    pub(super) sandboxes: Option<u32>,
    pub(super) creates: Option<u32>,
    pub(super) lifetime: Option<Positive>,
    pub(super) spend: Option<super::SpendValue>,
    pub(super) on_spend: Option<crate::budget::OnSpend>,
}

/// `[providers.NAME.limits]`: the same limits on one provider's sandboxes alone; `on_spend`
/// is the session's, set once in `[limits]`.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileProviderLimits {
    pub(super) sandboxes: Option<u32>,
    pub(super) creates: Option<u32>,
    pub(super) lifetime: Option<Positive>,
    pub(super) spend: Option<super::SpendValue>,
}

impl FileProviderLimits {
    pub(super) fn limits(self) -> crate::budget::Limits {
        crate::budget::Limits {
            sandboxes: self.sandboxes,
            creates: self.creates,
            lifetime: self.lifetime.map(|d| d.0),
            spend: self.spend.map(|s| s.0),
            on_spend: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileWatch {
    pub(super) grace: Option<Positive>,
    pub(super) renew_every: Option<HumanDuration>,
    pub(super) docker_proxy: Option<super::ProxyMode>,
    pub(super) cloud_proxy: Option<super::ProxyMode>,
    pub(super) keep_ryuk: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSweep {
    pub(super) prune_after: Option<HumanDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileReclaim {
    pub(super) concurrency: Option<Concurrency>,
    pub(super) deadline: Option<Positive>,
    pub(super) settle: Option<HumanDuration>,
    pub(super) retry_initial: Option<Positive>,
    pub(super) retry_max: Option<Positive>,
}

/// `[providers]`: a table per built-in provider, and any other name is a plugin. serde's
/// `deny_unknown_fields` does not combine with `flatten`, so the tables are routed by hand;
/// each one still denies its own unknown keys.
#[derive(Debug, Default)]
pub(super) struct FileProviders {
    pub(super) docker: FileDocker,
    pub(super) e2b: cloud::FileKeyed,
    pub(super) daytona: cloud::FileKeyed,
    pub(super) flyio: cloud::FileFly,
    pub(super) tenki: cloud::FileTenki,
    pub(super) modal: cloud::FileModal,
    pub(super) plugins: std::collections::BTreeMap<String, FilePlugin>,
}

impl FileProviders {
    /// Every provider's `price_per_hour` (plugins included) and `[providers.NAME.prices]`
    /// (E2B's and Daytona's, the creates the cloud proxy reads a size from; any other table
    /// that has one is refused as an unknown key), taken out of its table (see
    /// `crate::ledger::price`).
    pub(super) fn take_prices(&mut self) -> Prices {
        let per_hour = |per_hour: Option<Price>| ProviderPrices {
            per_hour: per_hour.map(|p| p.0),
            sizes: BTreeMap::new(),
        };
        let take = |per_hour: Option<Price>, sizes: &mut BTreeMap<String, Price>| ProviderPrices {
            per_hour: per_hour.map(|p| p.0),
            sizes: std::mem::take(sizes)
                .into_iter()
                .map(|(size, p)| (size, p.0))
                .collect(),
        };
        let mut all = vec![
            ("docker", per_hour(self.docker.price_per_hour)),
            ("e2b", take(self.e2b.price_per_hour, &mut self.e2b.prices)),
            (
                "daytona",
                take(self.daytona.price_per_hour, &mut self.daytona.prices),
            ),
            ("flyio", per_hour(self.flyio.price_per_hour)),
            ("tenki", per_hour(self.tenki.0.price_per_hour)),
            ("modal", per_hour(self.modal.price_per_hour)),
        ]
        .into_iter()
        .map(|(name, p)| (name.to_string(), p))
        .collect::<Vec<_>>();
        for (name, plugin) in &self.plugins {
            all.push((name.clone(), per_hour(plugin.price_per_hour)));
        }
        Prices::new(all)
    }
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
pub(super) struct FilePlugin {
    pub(super) command: Option<PluginCommand>,
    pub(super) timeout: Option<Positive>,
    pub(super) rate: Option<Rate>,
    pub(super) limits: Option<FileProviderLimits>,
    pub(super) price_per_hour: Option<Price>,
}

/// A plugin's `command`: a program and its leading arguments, never empty.
#[derive(Debug)]
pub(super) struct PluginCommand(pub(super) Vec<String>);

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
pub(super) struct FileDocker {
    pub(super) enabled: Option<bool>,
    pub(super) host: Option<String>,
    pub(super) api_version: Option<String>,
    pub(super) timeout: Option<Positive>,
    pub(super) rate: Option<Rate>,
    pub(super) limits: Option<FileProviderLimits>,
    pub(super) price_per_hour: Option<Price>,
}

pub(super) fn parse_file(path: &Path, text: &str) -> Result<FileConfig, ConfigError> {
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
        let offset = e.span().map_or(0, |s| s.start);
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
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[line_start..]
        .find('\n')
        .map_or(text.len(), |i| line_start + i);
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
