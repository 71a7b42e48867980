//! `--fleet` for `sessions` and `report`: what every host wrote to the fleet store
//! ([`crate::fleet`]) instead of this machine's ledger, read in one go.
//!
//! `sessions --fleet [--json]` lists every session of the store (host, owner, state, lease
//! left, claims, and `SPEND`, the session's sandbox time as its host last wrote it);
//! `report --fleet` counts the store's figures of every host ([`crate::fleet::spend`]) and
//! prints them as `report` prints a ledger's (`super::report`).
//!
//! Decisions:
//! - **No store configured is bad usage** (exit 2, as `sweep --fleet`), saying where one is
//!   configured; a store that cannot be read is exit 1, never an empty list or a report of
//!   nothing.
//! - **`SPEND` is as last written** (see [`crate::fleet::spend`]): while a session runs, its
//!   sidecar writes its figures once a renewal, so an alive sandbox's time lags by up to a
//!   renewal period (`lease / 3`); a note under the table says so.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;

use super::output::{self, sanitize, Exit};
use super::report::SpendJson;
use super::sessions::{held_note, spend_cell, ClaimJson};
use super::Error;
use crate::config::Settings;
use crate::fleet::redis::RedisStore;
use crate::fleet::{spend, FleetError, Store};
use crate::ledger::spend::daily::{day, start_ms};
use crate::ledger::spend::{By, Report, Share, Spend, Window};
use crate::protocol::Target;
use crate::timefmt;

/// Runs `read` against the configured store, on a runtime of its own.
fn read<T, F>(settings: &Settings, read: impl FnOnce(RedisStore) -> F) -> Result<T, Error>
where
    F: std::future::Future<Output = Result<T, FleetError>>,
{
    let f = settings.fleet.as_ref().ok_or_else(|| {
        Error::Usage(
            "--fleet needs a fleet store: [fleet] store in the config, or SANDGUARD_FLEET_STORE"
                .into(),
        )
    })?;
    let store = RedisStore::new(f).map_err(|e| Error::Failed(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime
        .block_on(read(store))
        .map_err(|e| Error::Failed(e.to_string()))
}

/// `report --fleet`: the store's figures of the whole UTC days from the one `since` ago falls
/// in (`None`: every day it keeps) until now, grouped `by`; and how many hosts they are of.
pub(super) fn report(
    settings: &Settings,
    since: Option<Duration>,
    by: By,
    now_ms: u64,
) -> Result<(Report, usize), Error> {
    let midnight = |age: Duration| start_ms(day(now_ms.saturating_sub(age.as_millis() as u64)));
    let window = Window {
        since_ms: since.map(midnight),
        now_ms,
    };
    let days = spend::days(window.since_ms, now_ms);
    let entries = read(settings, |store| async move { store.spend(days).await })?;
    Ok(spend::report(&entries, window, by))
}

/// What `report` prints under a fleet report's table.
pub(super) fn report_note(hosts: usize) -> String {
    format!(
        "From the fleet store: {hosts} host(s), each session's figures as its host last wrote \
         them (at most a third of the lease old while it runs).\n"
    )
}

#[derive(Serialize)]
struct FleetJson {
    session: String,
    host: String,
    state: &'static str,
    owner: String,
    /// Milliseconds of lease left; `null` when it expired.
    lease_left_ms: Option<u64>,
    started_at: String,
    providers: Vec<String>,
    claims: Vec<ClaimJson>,
    detached: Vec<ClaimJson>,
    /// Sandbox time as the session's host last wrote it ([`crate::fleet::spend`]).
    spend: SpendJson,
    #[serde(skip)]
    total: Share,
}

/// `sessions --fleet`: the store's sessions, and their figures, in one go.
pub(super) fn sessions(json: bool, settings: &Settings) -> Result<Exit, Error> {
    let now = crate::ledger::now_ms();
    let (sessions, entries) = read(settings, |store| async move {
        let sessions = store.sessions().await?;
        let Some(oldest) = sessions.iter().map(|s| s.record.started_ms).min() else {
            return Ok((sessions, Vec::new()));
        };
        let entries = store.spend(spend::days(Some(oldest), now)).await?;
        Ok((sessions, entries))
    })?;
    let mut spends = spend::per_session(&entries);
    let claims = |set: &BTreeSet<Target>| {
        set.iter()
            .map(|t| ClaimJson {
                provider: t.provider.clone(),
                id: t.id.clone(),
            })
            .collect()
    };
    let rows: Vec<FleetJson> = sessions
        .into_iter()
        .map(|s| {
            let key = (s.record.host.clone(), s.record.id.clone());
            let spend: Spend = spends.remove(&key).unwrap_or_default();
            FleetJson {
                state: s.state.as_str(),
                lease_left_ms: s.lease_left.map(|d| d.as_millis() as u64),
                started_at: timefmt::format_rfc3339((s.record.started_ms / 1000) as i64),
                claims: claims(&s.holdings.claims),
                detached: claims(&s.holdings.detached),
                session: s.record.id,
                host: s.record.host,
                owner: s.record.owner,
                providers: s.record.providers,
                spend: (&spend).into(),
                total: spend.total(),
            }
        })
        .collect();
    if json {
        output::emit_json(&serde_json::json!({ "sessions": rows }));
    } else if rows.is_empty() {
        output::emit("No sessions in the fleet store.\n");
    } else {
        output::emit(&table(&rows, output::colour::Paint::stdout()));
    }
    Ok(Exit::Ok)
}

fn table(rows: &[FleetJson], paint: output::colour::Paint) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                sanitize(&r.session).into_owned(),
                sanitize(&r.host).into_owned(),
                r.state.to_string(),
                r.lease_left_ms.map_or_else(
                    || "expired".into(),
                    |ms| format!("{:.1}s", ms as f64 / 1000.0),
                ),
                r.claims.len().to_string(),
                spend_cell(&r.total),
                sanitize(&r.owner).into_owned(),
            ]
        })
        .collect();
    // STATE's words, coloured on a terminal as `sessions` colours them (OWNER here is the
    // owner's label, not whether it lives).
    let mut text = output::painted_table(
        &[
            "SESSION", "HOST", "STATE", "LEASE", "HELD", "SPEND", "OWNER",
        ],
        &cells,
        &[2],
        paint,
    );
    text.push_str(&held_note("on its host, "));
    text.push_str(
        "SPEND: sandbox time as the session's host last wrote it to the store (an alive \
         sandbox's lags by up to a third of the lease); sandguard report --fleet sums it.\n",
    );
    text
}
