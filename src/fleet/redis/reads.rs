//! The read side of the store: a session's four keys read in one pipeline, and parsed back
//! into a [`FleetSession`] (a record half written or expired is no session).

use std::collections::BTreeMap;
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::RedisStore;
use crate::fleet::{decode_target, FleetError, FleetSession, FleetState, Holdings, SessionRecord};
use crate::ledger::SessionState;

/// A session's four reads: its hash, its lease's time left, its claims, its detaches.
type Row = (BTreeMap<String, String>, i64, Vec<String>, Vec<String>);

impl RedisStore {
    /// The sessions `ids`, in one pipelined round trip (four reads each); an id whose record
    /// is gone is left out.
    pub(super) async fn read(
        &self,
        c: &mut ConnectionManager,
        ids: Vec<String>,
    ) -> Result<Vec<FleetSession>, FleetError> {
        let mut pipe = redis::pipe();
        self.read_into(&mut pipe, &ids);
        let flat: Vec<redis::Value> = match pipe.query_async(c).await {
            Ok(flat) => flat,
            Err(e) => return Err(self.failed(&e).await),
        };
        self.parse(ids, flat.into_iter())
    }

    /// Adds to `pipe` the four reads of each session of `ids`.
    pub(super) fn read_into(&self, pipe: &mut redis::Pipeline, ids: &[String]) {
        for id in ids {
            pipe.hgetall(self.key("session", id))
                .pttl(self.key("lease", id))
                .smembers(self.key("claims", id))
                .smembers(self.key("detached", id));
        }
    }

    /// The sessions `ids` from the answers to [`Self::read_into`]'s reads.
    pub(super) fn parse(
        &self,
        ids: Vec<String>,
        mut values: impl Iterator<Item = redis::Value>,
    ) -> Result<Vec<FleetSession>, FleetError> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let (Some(h), Some(t), Some(cl), Some(de)) =
                (values.next(), values.next(), values.next(), values.next())
            else {
                break;
            };
            let row = (|| -> redis::RedisResult<Row> {
                Ok((
                    redis::from_redis_value(h)?,
                    redis::from_redis_value(t)?,
                    redis::from_redis_value(cl)?,
                    redis::from_redis_value(de)?,
                ))
            })();
            let (hash, pttl, claims, detached) = row.map_err(|e| self.error(&e))?;
            out.extend(parse_session(id, &hash, pttl, &claims, &detached));
        }
        Ok(out)
    }
}

/// A session as the store holds it; `None` for a hash with no host (a partial write, or one
/// that expired between the index and the read).
fn parse_session(
    id: String,
    hash: &BTreeMap<String, String>,
    pttl: i64,
    claims: &[String],
    detached: &[String],
) -> Option<FleetSession> {
    let host = hash.get("host")?.clone();
    let get = |k: &str| hash.get(k).cloned().unwrap_or_default();
    let num = |k: &str| hash.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let set = |v: &[String]| v.iter().filter_map(|s| decode_target(s)).collect();
    Some(FleetSession {
        record: SessionRecord {
            id,
            host,
            owner: get("owner"),
            pid: num("pid") as u32,
            labels: serde_json::from_str(&get("labels")).unwrap_or_default(),
            providers: serde_json::from_str(&get("providers")).unwrap_or_default(),
            started_ms: num("started_ms"),
        },
        state: FleetState::parse(&get("state")).unwrap_or(SessionState::Active.into()),
        lease_left: (pttl > 0).then(|| Duration::from_millis(pttl as u64)),
        holdings: Holdings {
            claims: set(claims),
            detached: set(detached),
        },
        reclaims: num("reclaims"),
    })
}
