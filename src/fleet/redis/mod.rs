//! The fleet store on Redis (or Valkey), through the `redis` crate's tokio connection manager
//! (which reconnects by itself); TLS (`rediss://`) on rustls with ring and the webpki roots.
//!
//! Decisions:
//! - **Connected lazily, at the first call**, never at construction: a sidecar says `ready`
//!   before Redis has been asked anything, and a store that is down costs it nothing but a
//!   failed call in its own task.
//! - **Every call has a deadline** ([`RedisStore::timeout`]: the connection and the response
//!   each, a third of the lease, at most 5 s), so a renewal never outlives its period.
//! - **Errors are reworded** from the client's kind and code only, with the URL redacted: no
//!   message of ours can carry the password; a host that cannot be resolved is said so
//!   ([`errors`] has how, and why a lookup is tried again to know it).

use std::ops::RangeInclusive;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, IntoConnectionInfo};
use tokio::sync::Mutex;

use super::{
    encode_target, Changes, FleetError, FleetSession, FleetState, Holdings, Lock, SessionRecord,
    SessionSpend, SpendEntry, Store, FINAL_KEEP,
};
use crate::config::FleetSettings;
use crate::ledger::SessionState;

mod errors;
mod reads;
mod spend;

use errors::describe;

/// How long a `stopped` session stays in the store: its own host's sweep judges it, and tells
/// the store when it ends it ([`crate::sweep::fleet::tell_ended`]); a host that never sweeps
/// again leaves only this record, which informs `sessions --fleet` for a while.
const STOPPED_KEEP: Duration = Duration::from_secs(7 * 86_400);

/// Deletes a key only if it holds the given value (a lock's owner releasing it).
const UNLOCK: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
/// Extends a key's expiry only if it holds the given value (a lock's owner renewing it).
const RELOCK: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

/// The fleet store on a Redis (or Valkey) server; see the module docs.
pub struct RedisStore {
    client: redis::Client,
    shown: String,
    prefix: String,
    timeout: Duration,
    conn: Mutex<Option<ConnectionManager>>,
}

impl RedisStore {
    /// A store for `settings`; connects at the first call.
    pub fn new(settings: &FleetSettings) -> Result<RedisStore, FleetError> {
        let shown = settings.display();
        let fail = |e: redis::RedisError| FleetError {
            store: shown.clone(),
            message: describe(&e),
        };
        let info = settings
            .store
            .expose()
            .into_connection_info()
            .map_err(fail)?;
        let mut redis = info.redis_settings().clone();
        if let Some(user) = &settings.user {
            redis = redis.set_username(user.expose());
        }
        if let Some(password) = &settings.password {
            redis = redis.set_password(password.expose());
        }
        let client = redis::Client::open(info.set_redis_settings(redis)).map_err(fail)?;
        Ok(RedisStore {
            client,
            shown,
            prefix: settings.prefix.clone(),
            timeout: (settings.lease / 3).min(Duration::from_secs(5)),
            conn: Mutex::new(None),
        })
    }

    fn key(&self, kind: &str, id: &str) -> String {
        format!("{}:{kind}:{id}", self.prefix)
    }

    fn index(&self) -> String {
        format!("{}:sessions", self.prefix)
    }

    async fn conn(&self) -> Result<ConnectionManager, FleetError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1)
            .set_max_delay(self.timeout);
        let made = tokio::time::timeout(
            self.timeout * 2,
            ConnectionManager::new_with_config(self.client.clone(), config),
        )
        .await;
        let c = match made {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(self.failed(&e).await),
            Err(_) => {
                return Err(FleetError {
                    store: self.shown.clone(),
                    message: "no answer to connect within the timeout".into(),
                })
            }
        };
        *slot = Some(c.clone());
        Ok(c)
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, FleetError> {
        let mut c = self.conn().await?;
        match pipe.query_async(&mut c).await {
            Ok(answer) => Ok(answer),
            Err(e) => Err(self.failed(&e).await),
        }
    }

    /// Adds to `pipe` a sweeper's progress ([`Store::set_state`]), as one transaction.
    fn state_into(&self, pipe: &mut redis::Pipeline, id: &str, state: FleetState, host: &str) {
        let session = self.key("session", id);
        pipe.cmd("MULTI").ignore();
        if state == SessionState::Reclaiming {
            pipe.hincr(&session, "reclaims", 1)
                .ignore()
                .hset(&session, "reclaimed_by", host)
                .ignore();
        }
        self.end_into(pipe, id, state);
        pipe.cmd("EXEC").ignore();
    }

    /// Adds to `pipe` what a final or sweeper-visible end writes.
    fn end_into(&self, pipe: &mut redis::Pipeline, id: &str, state: FleetState) {
        let session = self.key("session", id);
        pipe.hset(&session, "state", state.as_str())
            .ignore()
            .hset(&session, "updated_ms", crate::ledger::now_ms())
            .ignore()
            .del(self.key("lease", id))
            .ignore();
        if state == FleetState::Stopped {
            pipe.pexpire(&session, STOPPED_KEEP.as_millis() as i64)
                .ignore();
        }
        if state.is_final() {
            pipe.zrem(self.index(), id)
                .ignore()
                .del(self.key("claims", id))
                .ignore()
                .del(self.key("detached", id))
                .ignore()
                .pexpire(&session, FINAL_KEEP.as_millis() as i64)
                .ignore();
        }
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().max(1) as u64
}

#[async_trait::async_trait]
impl Store for RedisStore {
    async fn register(
        &self,
        r: &SessionRecord,
        holdings: &Holdings,
        lease: Duration,
    ) -> Result<(), FleetError> {
        let session = self.key("session", &r.id);
        let (claims, detached) = (self.key("claims", &r.id), self.key("detached", &r.id));
        let labels = serde_json::to_string(&r.labels).unwrap_or_default();
        let providers = serde_json::to_string(&r.providers).unwrap_or_default();
        let mut pipe = redis::pipe();
        pipe.atomic()
            .hset_multiple(
                &session,
                &[
                    ("host", r.host.clone()),
                    ("owner", r.owner.clone()),
                    ("pid", r.pid.to_string()),
                    ("labels", labels),
                    ("providers", providers),
                    ("started_ms", r.started_ms.to_string()),
                    ("lease_ms", ms(lease).to_string()),
                    ("state", SessionState::Active.as_str().into()),
                    ("updated_ms", crate::ledger::now_ms().to_string()),
                ],
            )
            .ignore()
            .persist(&session)
            .ignore()
            .zadd(self.index(), &r.id, r.started_ms)
            .ignore()
            .del(&claims)
            .ignore()
            .del(&detached)
            .ignore();
        let encode = |set: &std::collections::BTreeSet<crate::protocol::Target>| {
            set.iter().map(encode_target).collect::<Vec<_>>()
        };
        let (c, d) = (encode(&holdings.claims), encode(&holdings.detached));
        if !c.is_empty() {
            pipe.sadd(&claims, c).ignore();
        }
        if !d.is_empty() {
            pipe.sadd(&detached, d).ignore();
        }
        pipe.cmd("SET")
            .arg(self.key("lease", &r.id))
            .arg(&r.host)
            .arg("PX")
            .arg(ms(lease))
            .ignore();
        self.query::<()>(&pipe).await
    }

    async fn renew(
        &self,
        id: &str,
        host: &str,
        lease: Duration,
        changes: &Changes,
    ) -> Result<bool, FleetError> {
        let (claims, detached) = (self.key("claims", id), self.key("detached", id));
        let mut pipe = redis::pipe();
        pipe.exists(self.key("session", id));
        pipe.cmd("SET")
            .arg(self.key("lease", id))
            .arg(host)
            .arg("PX")
            .arg(ms(lease))
            .ignore();
        let encode =
            |v: &[crate::protocol::Target]| v.iter().map(encode_target).collect::<Vec<_>>();
        for (key, add, del) in [
            (&claims, &changes.claimed, &changes.unclaimed),
            (&detached, &changes.detached, &changes.undetached),
        ] {
            if !add.is_empty() {
                pipe.sadd(key, encode(add)).ignore();
            }
            if !del.is_empty() {
                pipe.srem(key, encode(del)).ignore();
            }
        }
        let (exists,): (bool,) = self.query(&pipe).await?;
        Ok(exists)
    }

    async fn finish(&self, id: &str, state: FleetState) -> Result<(), FleetError> {
        let mut pipe = redis::pipe();
        pipe.atomic();
        self.end_into(&mut pipe, id, state);
        self.query::<()>(&pipe).await
    }

    async fn sessions(&self) -> Result<Vec<FleetSession>, FleetError> {
        let mut c = self.conn().await?;
        let ids: Vec<String> = match c.zrange(self.index(), 0, -1).await {
            Ok(ids) => ids,
            Err(e) => return Err(self.failed(&e).await),
        };
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sessions = self.read(&mut c, ids.clone()).await?;
        // Index members whose record is gone (expired, evicted, or left half-written by a
        // progress write after it expired): dropped from the index, so it does not grow.
        let known: std::collections::HashSet<&str> =
            sessions.iter().map(|s| s.record.id.as_str()).collect();
        let dangling: Vec<&String> = ids
            .iter()
            .filter(|id| !known.contains(id.as_str()))
            .collect();
        if !dangling.is_empty() {
            let mut pipe = redis::pipe();
            pipe.zrem(self.index(), &dangling).ignore();
            for id in &dangling {
                pipe.del(self.key("session", id)).ignore();
            }
            if let Err(e) = pipe.query_async::<()>(&mut c).await {
                tracing::debug!("cannot drop dangling fleet sessions: {}", describe(&e));
            }
        }
        Ok(sessions)
    }

    async fn session(&self, id: &str) -> Result<Option<FleetSession>, FleetError> {
        let mut c = self.conn().await?;
        Ok(self.read(&mut c, vec![id.to_string()]).await?.pop())
    }

    async fn lock(&self, id: &str, token: &str, ttl: Duration) -> Result<Lock, FleetError> {
        let mut pipe = redis::pipe();
        pipe.cmd("SET")
            .arg(self.key("lock", id))
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(ms(ttl));
        // Read in the same round trip; the answer counts only if the lock was taken, and the
        // lock is taken before the reads run (a pipeline runs in order).
        let ids = vec![id.to_string()];
        self.read_into(&mut pipe, &ids);
        let mut values = self.query::<Vec<redis::Value>>(&pipe).await?.into_iter();
        let set: Option<String> = match values.next() {
            Some(v) => redis::from_redis_value(v).map_err(|e| self.error(&e.into()))?,
            None => None,
        };
        if set.is_none() {
            return Ok(Lock::Busy);
        }
        Ok(Lock::Held(self.parse(ids, values)?.pop().map(Box::new)))
    }

    async fn relock(&self, id: &str, token: &str, ttl: Duration) -> Result<bool, FleetError> {
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(RELOCK)
            .arg(1)
            .arg(self.key("lock", id))
            .arg(token)
            .arg(ms(ttl));
        let (n,): (i64,) = self.query(&pipe).await?;
        Ok(n == 1)
    }

    async fn unlock(
        &self,
        id: &str,
        token: &str,
        state: Option<(FleetState, &str)>,
    ) -> Result<(), FleetError> {
        let mut pipe = redis::pipe();
        if let Some((state, host)) = state {
            self.state_into(&mut pipe, id, state, host);
        }
        pipe.cmd("EVAL")
            .arg(UNLOCK)
            .arg(1)
            .arg(self.key("lock", id))
            .arg(token)
            .ignore();
        self.query::<()>(&pipe).await
    }

    async fn set_state(&self, id: &str, state: FleetState, host: &str) -> Result<(), FleetError> {
        let mut pipe = redis::pipe();
        self.state_into(&mut pipe, id, state, host);
        self.query::<()>(&pipe).await
    }

    async fn put_spend(&self, spend: &SessionSpend) -> Result<(), FleetError> {
        self.write_spend(spend).await
    }

    async fn spend(&self, days: RangeInclusive<u64>) -> Result<Vec<SpendEntry>, FleetError> {
        self.read_spend(days).await
    }

    async fn close_spend(
        &self,
        host: &str,
        session: &str,
        providers: &[String],
        days: RangeInclusive<u64>,
    ) -> Result<(), FleetError> {
        self.close_spend_of(host, session, providers, days).await
    }
}
