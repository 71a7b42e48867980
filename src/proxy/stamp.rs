//! The stamping step both proxies share: the session's labels merged into a create body's
//! label map, read as the service reads it (the Docker daemon's `Labels`, E2B's `metadata`,
//! Daytona's `labels`). [`stamp`] is the step itself, on a parsed object; [`merge`] is it on a
//! cloud create's raw body. The Docker proxy reads its bodies itself (`null` is a config to Go)
//! and then takes the same step (`proxy::docker::create::stamp`).
//!
//! The body is kept as [`Json`] (objects as ordered pairs, duplicates included), so every key
//! the service could take for the label map is seen. A Go service (E2B) decodes with
//! `encoding/json`: every key equal to the field's name under case folding is applied in
//! order, objects merging, `null` resetting ([`Keys::Go`]). A JavaScript service (Daytona's
//! NestJS) reads with `JSON.parse`: the key as spelled, the last one replacing the others
//! ([`Keys::Exact`]). Either way the matching keys are replaced by one key holding their
//! merged map with the session's labels over it, so no later key can override
//! `sandguard.session`. An empty body is stamped as `{}`; anything else that is not a JSON
//! object (or whose label map is not an object) cannot be stamped, and the caller refuses it.
//! The merged map also says whether the create asked to be detached ([`Hold`]).
//!
//! A body to be stamped is read whole first ([`collect`]), at most [`MAX_CREATE_BODY`]: a
//! larger one cannot be stamped and the proxy refuses it (`413`), never passing it on. A body
//! that announces a larger length is refused before any of it is read.

use std::borrow::Cow;
use std::collections::BTreeMap;

use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Bytes};

use crate::proxy::claim::Hold;
use crate::proxy::json::{go_field, go_map, insert, Json};
use crate::proxy::refusal::Unstampable;

/// The largest create (or commit) body buffered for stamping; a larger one is refused (413).
pub(crate) const MAX_CREATE_BODY: u64 = 8 * 1024 * 1024;

/// Why a body could not be collected: `true` when it was over the bound.
pub(crate) struct TooLarge(pub bool);

/// Reads a whole body, at most `max` bytes.
pub(crate) async fn collect<B>(body: B, max: u64) -> Result<Bytes, TooLarge>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if body.size_hint().lower() > max {
        return Err(TooLarge(true));
    }
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) => Err(TooLarge(
            e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some(),
        )),
    }
}

/// What the proxies stamp a create with: the session's labels, and on a sandbox (a Docker
/// container, a cloud sandbox) with a `lifetime` limit ([`crate::budget::Limits::lifetime`])
/// `sandguard.expires` at the create's time plus the limit, so that the limit holds if
/// sandguard dies (a sweep removes what is past its `sandguard.expires`, detached or not). A
/// create that sets an earlier `sandguard.expires` itself keeps its own ([`stamp`]).
///
/// Decision: a lifetime ages sandboxes, never a session's Docker networks or volumes (DESIGN,
/// "Ownership before age"): those go with the session, so they are stamped with the
/// session's labels alone ([`Labels::now`] with no provider), and a sweep never takes a
/// volume's data for the lifetime of the container that used it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Labels {
    pub session: BTreeMap<String, String>,
    /// The session's limits, whose lifetime of each provider's sandboxes is stamped.
    pub budget: crate::budget::Budget,
}

impl From<BTreeMap<String, String>> for Labels {
    fn from(session: BTreeMap<String, String>) -> Labels {
        Labels {
            session,
            budget: Default::default(),
        }
    }
}

impl Labels {
    /// The labels for a create made now: of a sandbox of `sandbox`'s provider, with its
    /// lifetime; of anything else (`None`: a Docker network or volume), the session's alone.
    /// The proxies pass the provider their limits count the create under
    /// (`crate::proxy::create::Creates::counted`), so what a lifetime ages and what a limit
    /// counts are one notion.
    pub(crate) fn now(&self, sandbox: Option<&str>) -> Cow<'_, BTreeMap<String, String>> {
        let Some(lifetime) = sandbox.and_then(|provider| self.budget.lifetime(provider)) else {
            return Cow::Borrowed(&self.session);
        };
        let at =
            crate::timefmt::now_unix() + i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX / 2);
        let mut labels = self.session.clone();
        labels.insert(crate::labels::EXPIRES.to_string(), at.to_string());
        Cow::Owned(labels)
    }

    /// The session id its labels carry (`sandguard.session`).
    pub(crate) fn session_id(&self) -> String {
        self.session
            .get(crate::labels::SESSION)
            .cloned()
            .unwrap_or_default()
    }
}

/// How the service finds its label map's key.
#[derive(Debug, Clone, Copy)]
pub enum Keys {
    /// Go's `encoding/json` field `name` (its JSON tag).
    Go(&'static str),
    /// `JSON.parse`: exactly `name`, the last one winning.
    Exact(&'static str),
}

/// `body` with `labels` merged into its label map, and what the sidecar journals for the
/// sandbox it creates ([`Hold::of`] the merged map); `Err` says why it cannot be stamped.
pub(crate) fn merge(
    body: &[u8],
    keys: Keys,
    labels: &BTreeMap<String, String>,
) -> Result<(Vec<u8>, Hold), Unstampable> {
    let mut pairs = object(body)?;
    let hold = stamp(&mut pairs, keys, labels)?;
    Ok((Json::Object(pairs).to_vec(), hold))
}

/// The stamping step: every key of `pairs` that `keys` matches is taken out, and one key
/// holding their merged map with `labels` over it is put last; what the sidecar journals for
/// the object ([`Hold::of`] the merged map). `Err` says why it cannot be stamped.
pub(crate) fn stamp(
    pairs: &mut Vec<(String, Json)>,
    keys: Keys,
    labels: &BTreeMap<String, String>,
) -> Result<Hold, Unstampable> {
    let mut merged = take(pairs, keys)?.unwrap_or_default();
    for (k, v) in labels {
        if k == crate::labels::EXPIRES && earlier(&merged, v) {
            continue;
        }
        insert(&mut merged, k, Json::str(v));
    }
    let hold = Hold::of(&merged);
    pairs.push((keys.name().to_string(), Json::Object(merged)));
    Ok(hold)
}

/// Whether `merged` sets a `sandguard.expires` of its own earlier than `ours` (both unix
/// seconds): a create may ask to end sooner than a lifetime limit, never later.
fn earlier(merged: &[(String, Json)], ours: &str) -> bool {
    let own = merged
        .iter()
        .rev()
        .find(|(k, _)| k == crate::labels::EXPIRES)
        .and_then(|(_, v)| match v {
            Json::String(v) => v.parse::<i64>().ok(),
            _ => None,
        });
    matches!((own, ours.parse::<i64>()), (Some(own), Ok(ours)) if own < ours)
}

/// Takes every key `keys` matches out of `pairs`, and returns their map as the service reads
/// it (`None`: no such key, or `null`).
pub fn take(
    pairs: &mut Vec<(String, Json)>,
    keys: Keys,
) -> Result<Option<Vec<(String, Json)>>, Unstampable> {
    let found = match keys {
        Keys::Go(name) => go_merged(pairs, name)?,
        Keys::Exact(name) => last(pairs, name)?,
    };
    pairs.retain(|(k, _)| !matches(keys, k));
    Ok(found)
}

impl Keys {
    fn name(self) -> &'static str {
        match self {
            Keys::Go(name) | Keys::Exact(name) => name,
        }
    }
}

fn matches(keys: Keys, key: &str) -> bool {
    match keys {
        Keys::Go(name) => go_field(key, name),
        Keys::Exact(name) => key == name,
    }
}

/// The body's top-level object (an empty body is `{}`).
fn object(body: &[u8]) -> Result<Vec<(String, Json)>, Unstampable> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    match Json::parse(body).map_err(|e| Unstampable::NotJson(e.to_string()))? {
        Json::Object(pairs) => Ok(pairs),
        _ => Err(Unstampable::NotObject),
    }
}

type Map = Option<Vec<(String, Json)>>;

fn go_merged(pairs: &[(String, Json)], name: &'static str) -> Result<Map, Unstampable> {
    let mut merged = None;
    for (_, v) in pairs.iter().filter(|(k, _)| go_field(k, name)) {
        go_map(&mut merged, v).map_err(|_| Unstampable::Labels(name))?;
    }
    Ok(merged)
}

fn last(pairs: &[(String, Json)], name: &'static str) -> Result<Map, Unstampable> {
    match pairs.iter().rev().find(|(k, _)| k == name) {
        None | Some((_, Json::Null)) => Ok(None),
        Some((_, Json::Object(map))) => Ok(Some(map.clone())),
        Some(_) => Err(Unstampable::Labels(name)),
    }
}

/// The non-empty string at `key` of a JSON object answer.
pub(crate) fn id_at(answer: &[u8], key: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(answer).ok()?;
    let id = value.get(key)?.as_str()?;
    (!id.is_empty()).then(|| id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lifetime_is_stamped_on_sandboxes_only() {
        let aged = Labels {
            session: BTreeMap::from([("sandguard.session".into(), "s1".into())]),
            budget: crate::budget::Limits {
                lifetime: Some(std::time::Duration::from_secs(120)),
                ..Default::default()
            }
            .into(),
        };
        let now = crate::timefmt::now_unix();
        let container = aged.now(Some("docker"));
        let expires: i64 = container[crate::labels::EXPIRES].parse().unwrap();
        assert!((now + 120..=now + 122).contains(&expires), "{expires}");
        let network_or_volume = aged.now(None);
        assert_eq!(
            *network_or_volume, aged.session,
            "the session's labels alone"
        );
        let unlimited = Labels::from(aged.session.clone());
        assert_eq!(*unlimited.now(Some("docker")), aged.session);
    }
}
