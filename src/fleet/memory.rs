//! An in-memory [`Store`] with the Redis store's semantics (leases and locks expire on tokio's
//! clock), for unit tests of the sidecar's registrar and the fleet sweep; it can be switched
//! off ([`MemoryStore::set_down`]) and emptied ([`MemoryStore::flush`]) as Redis can.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::spend::{self, SessionSpend, SpendEntry};
use super::{Changes, FleetError, FleetSession, FleetState, Holdings, Lock, SessionRecord, Store};
use crate::ledger::SessionState;

#[derive(Default)]
struct Data {
    sessions: BTreeMap<String, (SessionRecord, FleetState, u64)>,
    leases: HashMap<String, Instant>,
    holdings: HashMap<String, Holdings>,
    locks: HashMap<String, (String, Instant)>,
    /// Each day's hash of figures, encoded as Redis holds them ([`super::spend`]).
    spend: BTreeMap<u64, BTreeMap<String, String>>,
}

#[derive(Default)]
pub(crate) struct MemoryStore {
    data: Mutex<Data>,
    down: std::sync::atomic::AtomicBool,
    /// Calls made (each one round trip on Redis).
    pub calls: std::sync::atomic::AtomicUsize,
}

impl MemoryStore {
    pub(crate) fn set_down(&self, down: bool) {
        self.down.store(down, std::sync::atomic::Ordering::SeqCst);
    }

    /// Loses everything, as a Redis restarted without persistence does.
    pub(crate) fn flush(&self) {
        *self.lock_data() = Data::default();
    }

    fn lock_data(&self) -> std::sync::MutexGuard<'_, Data> {
        self.data
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn enter(&self) -> Result<std::sync::MutexGuard<'_, Data>, FleetError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(FleetError {
                store: "memory://".into(),
                message: "connection refused".into(),
            });
        }
        Ok(self.lock_data())
    }

    /// The session's state and lease, as a test checks them.
    pub(crate) fn peek(&self, id: &str) -> Option<(FleetState, bool, Holdings)> {
        let d = self.lock_data();
        let (_, state, _) = d.sessions.get(id)?;
        let alive = d.leases.get(id).is_some_and(|t| *t > Instant::now());
        Some((
            *state,
            alive,
            d.holdings.get(id).cloned().unwrap_or_default(),
        ))
    }
}

/// One session as the store would answer it.
fn view(d: &Data, id: &str) -> Option<FleetSession> {
    let (record, state, reclaims) = d.sessions.get(id)?;
    Some(FleetSession {
        record: record.clone(),
        state: *state,
        lease_left: d
            .leases
            .get(id)
            .and_then(|t| t.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero()),
        holdings: d.holdings.get(id).cloned().unwrap_or_default(),
        reclaims: *reclaims,
    })
}

fn end(d: &mut Data, id: &str, state: FleetState) {
    d.leases.remove(id);
    if let Some(s) = d.sessions.get_mut(id) {
        s.1 = state;
    }
    if state.is_final() {
        d.holdings.remove(id);
    }
}

#[async_trait::async_trait]
impl Store for MemoryStore {
    async fn register(
        &self,
        record: &SessionRecord,
        holdings: &Holdings,
        lease: Duration,
    ) -> Result<(), FleetError> {
        let mut d = self.enter()?;
        let reclaims = d.sessions.get(&record.id).map_or(0, |s| s.2);
        d.sessions.insert(
            record.id.clone(),
            (record.clone(), SessionState::Active.into(), reclaims),
        );
        d.holdings.insert(record.id.clone(), holdings.clone());
        d.leases.insert(record.id.clone(), Instant::now() + lease);
        Ok(())
    }

    async fn renew(
        &self,
        id: &str,
        _host: &str,
        lease: Duration,
        c: &Changes,
    ) -> Result<bool, FleetError> {
        let mut d = self.enter()?;
        d.leases.insert(id.to_string(), Instant::now() + lease);
        let h = d.holdings.entry(id.to_string()).or_default();
        h.claims.extend(c.claimed.iter().cloned());
        h.detached.extend(c.detached.iter().cloned());
        for t in &c.unclaimed {
            h.claims.remove(t);
        }
        for t in &c.undetached {
            h.detached.remove(t);
        }
        Ok(d.sessions.contains_key(id))
    }

    async fn finish(&self, id: &str, state: FleetState) -> Result<(), FleetError> {
        let mut d = self.enter()?;
        end(&mut d, id, state);
        Ok(())
    }

    async fn sessions(&self) -> Result<Vec<FleetSession>, FleetError> {
        let d = self.enter()?;
        Ok(d.sessions
            .keys()
            .filter_map(|id| view(&d, id))
            .filter(|s| !s.state.is_final())
            .collect())
    }

    async fn session(&self, id: &str) -> Result<Option<FleetSession>, FleetError> {
        let d = self.enter()?;
        Ok(view(&d, id))
    }

    async fn lock(&self, id: &str, token: &str, ttl: Duration) -> Result<Lock, FleetError> {
        {
            let mut d = self.enter()?;
            let now = Instant::now();
            if d.locks.get(id).is_some_and(|(_, until)| *until > now) {
                return Ok(Lock::Busy);
            }
            d.locks
                .insert(id.to_string(), (token.to_string(), now + ttl));
        }
        Ok(Lock::Held(self.session(id).await?.map(Box::new)))
    }

    async fn relock(&self, id: &str, token: &str, ttl: Duration) -> Result<bool, FleetError> {
        let mut d = self.enter()?;
        let now = Instant::now();
        match d.locks.get_mut(id) {
            Some((t, until)) if t == token && *until > now => {
                *until = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn unlock(
        &self,
        id: &str,
        token: &str,
        state: Option<(FleetState, &str)>,
    ) -> Result<(), FleetError> {
        if let Some((state, host)) = state {
            self.set_state(id, state, host).await?;
        }
        let mut d = self.enter()?;
        if d.locks.get(id).is_some_and(|(t, _)| t == token) {
            d.locks.remove(id);
        }
        Ok(())
    }

    async fn set_state(&self, id: &str, state: FleetState, _host: &str) -> Result<(), FleetError> {
        let mut d = self.enter()?;
        if state == SessionState::Reclaiming {
            if let Some(s) = d.sessions.get_mut(id) {
                s.2 += 1;
            }
        }
        end(&mut d, id, state);
        Ok(())
    }

    async fn put_spend(&self, s: &SessionSpend) -> Result<(), FleetError> {
        let mut d = self.enter()?;
        for (day, field, value) in s.fields() {
            d.spend.entry(day).or_default().insert(field, value);
        }
        Ok(())
    }

    async fn spend(&self, days: RangeInclusive<u64>) -> Result<Vec<SpendEntry>, FleetError> {
        let d = self.enter()?;
        Ok(d.spend
            .range(days)
            .flat_map(|(day, hash)| hash.iter().filter_map(|(f, v)| spend::decode(*day, f, v)))
            .collect())
    }

    async fn close_spend(
        &self,
        host: &str,
        session: &str,
        providers: &[String],
        days: RangeInclusive<u64>,
    ) -> Result<(), FleetError> {
        let mut d = self.enter()?;
        for (_, hash) in d.spend.range_mut(days) {
            for p in providers {
                let field = spend::field(host, session, p);
                if let Some(closed) = hash.get(&field).and_then(|v| spend::close(v)) {
                    hash.insert(field, closed);
                }
            }
        }
        Ok(())
    }
}
