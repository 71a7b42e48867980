//! The bodies the proxy rewrites and the answers it claims from.
//!
//! - A create body gets the session's labels: every top-level key Go would decode into
//!   `Labels` (any spelling under case folding, any number of them; see [`crate::proxy::json`]) is
//!   merged, in order, into one `Labels` object with the session's values winning, so a later
//!   `labels` key cannot override `sandguard.session`. An empty body or `null` (which Go
//!   decodes into an empty config, and a volume create then makes a volume) is stamped as
//!   `{}`. Anything else that is not an object cannot be stamped and is refused.
//! - A container create's named volumes ([`named_volumes`]): `HostConfig.Binds` entries
//!   `NAME:/path[:opts]` (NAME not an absolute path) and `HostConfig.Mounts` entries with
//!   `Type: "volume"` and a `Source`, read as Go's decoder reads them (keys fold, later keys
//!   win, `null` resets). The daemon would create them without labels; the proxy creates
//!   them first (`super::volumes`) with the labels, Docker's driver and options for that
//!   mount: a bind uses `HostConfig.VolumeDriver`; a mount uses its
//!   `VolumeOptions.DriverConfig` and never `VolumeDriver` (Docker's mount parser ignores it).
//! - What the sidecar journals for the object ([`Hold`]) is read from the merged labels: a
//!   create asking `sandguard.detached=true` is detached, not claimed. A named volume made for
//!   a detached container is detached with it ([`Volume::hold`]).
//! - A commit body is a container config: its `Labels` lose every `sandguard.*` key, and the
//!   target gains one more `changes` instruction ([`COMMIT_CHANGE`]) that blanks the four
//!   keys in the image, over whatever the committed container carried. An image committed
//!   through the proxy therefore starts no container that looks owned.
//! - An answer is claimed only when it shows this session made the object ([`claimable`]):
//!   where it carries `Labels` (volumes do), `sandguard.session` must be this session's id.
//!   Docker's volume create is idempotent, so a volume that already existed comes back with its
//!   own old labels and is never claimed.

use std::collections::BTreeMap;

use percent_encoding::utf8_percent_encode;

use super::target::Create;
use crate::labels;
use crate::providers::http::NOT_UNRESERVED;
use crate::proxy::claim::Hold;
use crate::proxy::json::{go_field, go_map, insert, Json};
use crate::proxy::refusal::Unstampable;
use crate::proxy::stamp::{self, Keys};

/// Docker's label map: the `Labels` field, found as Go's `encoding/json` finds it.
const LABELS: Keys = Keys::Go("Labels");

/// The `changes` instruction added to every commit.
pub(crate) const COMMIT_CHANGE: &str =
    r#"LABEL sandguard.session="" sandguard.owner="" sandguard.expires="" sandguard.detached="""#;

/// A create body with the session's labels merged into its one `Labels` key, and what the
/// sidecar journals for what it creates (`Hold::of` the merged labels).
pub fn stamp(body: &[u8], labels: &BTreeMap<String, String>) -> Result<(Json, Hold), Unstampable> {
    let mut pairs = object(body)?.unwrap_or_default();
    let hold = stamp::stamp(&mut pairs, LABELS, labels)?;
    Ok((Json::Object(pairs), hold))
}

/// A commit body without sandguard's labels (an empty or `null` body stays as it is).
pub fn scrub_commit(body: &[u8]) -> Result<Vec<u8>, Unstampable> {
    let Some(mut pairs) = object(body)? else {
        return Ok(body.to_vec());
    };
    if !pairs.iter().any(|(k, _)| go_field(k, "Labels")) {
        return Ok(body.to_vec());
    }
    let merged = stamp::take(&mut pairs, LABELS)?.map(|mut m| {
        m.retain(|(k, _)| !is_sandguard(k));
        Json::Object(m)
    });
    pairs.push(("Labels".into(), merged.unwrap_or(Json::Null)));
    Ok(Json::Object(pairs).to_vec())
}

/// A commit target with `COMMIT_CHANGE` as its last `changes` parameter.
pub fn commit_target(target: &str) -> String {
    let sep = match target.find('?') {
        None => "?",
        Some(_) if target.ends_with(['?', '&']) => "",
        Some(_) => "&",
    };
    let encoded = utf8_percent_encode(COMMIT_CHANGE, NOT_UNRESERVED);
    format!("{target}{sep}changes={encoded}")
}

fn is_sandguard(key: &str) -> bool {
    key.get(..10)
        .is_some_and(|p| p.eq_ignore_ascii_case("sandguard."))
}

/// The body's top-level object; `None` for a body Go reads as an empty config.
fn object(body: &[u8]) -> Result<Option<Vec<(String, Json)>>, Unstampable> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    match Json::parse(body).map_err(|e| Unstampable::NotJson(e.to_string()))? {
        Json::Object(pairs) => Ok(Some(pairs)),
        Json::Null => Ok(None),
        _ => Err(Unstampable::NotObject),
    }
}

/// The id an answer names if this session made the object: `Id` (volumes: `Name`), and,
/// where the answer carries labels, `sandguard.session` equal to `session`; with, for a
/// volume, its identity: its `CreatedAt` in unix seconds, which the claim is pinned to (a
/// volume's name is not its identity, `crate::providers::docker::claim`).
pub(crate) fn claimable(
    kind: Create,
    answer: &[u8],
    session: &str,
) -> Option<(String, Option<String>)> {
    let value: serde_json::Value = serde_json::from_slice(answer).ok()?;
    let id = value.get(if kind == Create::Volume { "Name" } else { "Id" })?;
    let id = id.as_str().filter(|id| !id.is_empty())?;
    let ours = match value.get("Labels") {
        Some(l) => l.get(labels::SESSION).and_then(|s| s.as_str()) == Some(session),
        // A volume answer always carries its labels; without them, nothing proves it is ours.
        None => kind != Create::Volume,
    };
    let created = (kind == Create::Volume)
        .then(|| value.get("CreatedAt")?.as_str())
        .flatten()
        .and_then(crate::timefmt::parse_rfc3339)
        .map(|t| t.to_string());
    ours.then(|| (id.to_string(), created))
}

/// A named volume a container create would bring into being.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Volume {
    pub name: String,
    pub driver: String,
    pub options: Option<Vec<(String, Json)>>,
    pub labels: Option<Vec<(String, Json)>>,
}

impl Volume {
    /// A detach when the container it is made for is detached, or its own labels ask for it.
    pub(crate) fn hold(&self, container: Hold) -> Hold {
        match (container, &self.labels) {
            (Hold::Claim, Some(labels)) => Hold::of(labels),
            (other, _) => other,
        }
    }

    /// The body of `POST /volumes/create` for it, with the session's labels winning.
    pub(crate) fn create_body(&self, stamp: &BTreeMap<String, String>) -> Vec<u8> {
        let mut labels = self.labels.clone().unwrap_or_default();
        for (k, v) in stamp {
            insert(&mut labels, k, Json::str(v));
        }
        let mut pairs = vec![
            ("Name".to_string(), Json::str(&self.name)),
            ("Labels".to_string(), Json::Object(labels)),
        ];
        if !self.driver.is_empty() {
            pairs.push(("Driver".into(), Json::str(&self.driver)));
        }
        if let Some(o) = &self.options {
            pairs.push(("DriverOpts".into(), Json::Object(o.clone())));
        }
        Json::Object(pairs).to_vec()
    }
}

/// The named volumes a container create body mounts, each once (the first mention wins).
pub fn named_volumes(body: &Json) -> Result<Vec<Volume>, Unstampable> {
    let Json::Object(pairs) = body else {
        return Ok(Vec::new());
    };
    let mut host: Option<HostConfig> = None;
    for (_, v) in pairs.iter().filter(|(k, _)| go_field(k, "HostConfig")) {
        pointer(&mut host, v).map_err(Unstampable::HostConfig)?;
    }
    let Some(host) = host else {
        return Ok(Vec::new());
    };
    let binds = host.binds.live().iter().filter_map(|b| {
        let parts: Vec<&str> = b.split(':').collect();
        let name = *parts.first()?;
        let named = (2..=3).contains(&parts.len()) && !name.is_empty() && !name.starts_with('/');
        named.then(|| Volume {
            name: name.to_string(),
            driver: host.volume_driver.clone(),
            ..Volume::default()
        })
    });
    let mounts = host.mounts.live().iter().filter_map(|m| {
        if m.kind != "volume" || m.source.is_empty() {
            return None;
        }
        let options = m.options.clone().unwrap_or_default();
        let driver = options.driver.unwrap_or_default();
        Some(Volume {
            name: m.source.clone(),
            driver: driver.name,
            options: driver.options,
            labels: options.labels,
        })
    });
    let mut out: Vec<Volume> = Vec::new();
    for v in binds.chain(mounts) {
        if !out.iter().any(|o| o.name == v.name) {
            out.push(v);
        }
    }
    Ok(out)
}

// A small model of Go's `encoding/json` for the fields that name volumes. Structs take keys
// by folded name, in order; pointers and slices are reset by `null`; a slice decodes each
// element into the one already at that index (Go reuses the backing array, so an element
// from an earlier key shows through a later, shorter one: the model keeps every element it
// ever saw, which at worst creates a volume Go would not have mounted, labelled and claimed).

type Map = Option<Vec<(String, Json)>>;

#[derive(Debug, Clone, Default)]
struct HostConfig {
    binds: Slice<String>,
    mounts: Slice<Mount>,
    volume_driver: String,
}

#[derive(Debug, Clone, Default)]
struct Mount {
    kind: String,
    source: String,
    options: Option<VolumeOptions>,
}

#[derive(Debug, Clone, Default)]
struct VolumeOptions {
    labels: Map,
    driver: Option<DriverConfig>,
}

#[derive(Debug, Clone, Default)]
struct DriverConfig {
    name: String,
    options: Map,
}

#[derive(Debug, Clone, Default)]
struct Slice<T> {
    items: Vec<T>,
    len: usize,
}

impl<T> Slice<T> {
    fn live(&self) -> &[T] {
        &self.items[..self.len]
    }
}

type Decoded = Result<(), &'static str>;

trait Struct: Default {
    fn field(&mut self, key: &str, value: &Json) -> Decoded;
}

impl Struct for HostConfig {
    fn field(&mut self, key: &str, v: &Json) -> Decoded {
        match key {
            k if go_field(k, "Binds") => slice(&mut self.binds, v, string),
            k if go_field(k, "Mounts") => slice(&mut self.mounts, v, structure),
            k if go_field(k, "VolumeDriver") => string(&mut self.volume_driver, v),
            _ => Ok(()),
        }
    }
}

impl Struct for Mount {
    fn field(&mut self, key: &str, v: &Json) -> Decoded {
        match key {
            k if go_field(k, "Type") => string(&mut self.kind, v),
            k if go_field(k, "Source") => string(&mut self.source, v),
            k if go_field(k, "VolumeOptions") => pointer(&mut self.options, v),
            _ => Ok(()),
        }
    }
}

impl Struct for VolumeOptions {
    fn field(&mut self, key: &str, v: &Json) -> Decoded {
        match key {
            k if go_field(k, "Labels") => go_map(&mut self.labels, v),
            k if go_field(k, "DriverConfig") => pointer(&mut self.driver, v),
            _ => Ok(()),
        }
    }
}

impl Struct for DriverConfig {
    fn field(&mut self, key: &str, v: &Json) -> Decoded {
        match key {
            k if go_field(k, "Name") => string(&mut self.name, v),
            k if go_field(k, "Options") => go_map(&mut self.options, v),
            _ => Ok(()),
        }
    }
}

fn structure<T: Struct>(t: &mut T, v: &Json) -> Decoded {
    match v {
        Json::Null => Ok(()),
        Json::Object(pairs) => pairs.iter().try_for_each(|(k, v)| t.field(k, v)),
        _ => Err("an object field is not an object"),
    }
}

fn pointer<T: Struct>(p: &mut Option<T>, v: &Json) -> Decoded {
    match v {
        Json::Null => {
            *p = None;
            Ok(())
        }
        _ => structure(p.get_or_insert_with(T::default), v),
    }
}

fn string(s: &mut String, v: &Json) -> Decoded {
    match v {
        Json::Null => Ok(()),
        Json::String(x) => {
            *s = x.clone();
            Ok(())
        }
        _ => Err("a string field is not a string"),
    }
}

fn slice<T: Default>(s: &mut Slice<T>, v: &Json, each: fn(&mut T, &Json) -> Decoded) -> Decoded {
    match v {
        Json::Null => {
            *s = Slice {
                items: Vec::new(),
                len: 0,
            }
        }
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if i == s.items.len() {
                    s.items.push(T::default());
                }
                each(&mut s.items[i], item)?;
            }
            s.len = items.len();
        }
        _ => return Err("a list field is not a list"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;
