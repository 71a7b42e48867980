//! The spend side of the store on Redis ([`crate::fleet::spend`] has what a field holds):
//! a session's figures written with one `HSET` per day and the day's expiry, a report's days
//! read with one `HGETALL` each, and a sweep's close done by a script, each in one round trip.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use super::RedisStore;
use crate::fleet::spend::{self, SessionSpend, SpendEntry};
use crate::fleet::FleetError;
use crate::ledger::spend::daily::day_name;

/// Closes the figures of a session (the fields `ARGV`, in the day hashes `KEYS`): `alive` and
/// `alive_ms` to 0 where either is not, as [`spend::close`] does; a value that is not a JSON
/// object is left alone. (`cjson` writes numbers to 14 significant digits: unix milliseconds
/// have 13 until the year 2286.)
const CLOSE: &str = r"
local n = 0
for _, key in ipairs(KEYS) do
  for _, field in ipairs(ARGV) do
    local v = redis.call('HGET', key, field)
    if v then
      local ok, e = pcall(cjson.decode, v)
      if ok and type(e) == 'table' and ((tonumber(e.alive) or 0) > 0 or (tonumber(e.alive_ms) or 0) > 0) then
        e.alive = 0
        e.alive_ms = 0
        redis.call('HSET', key, field, cjson.encode(e))
        n = n + 1
      end
    end
  end
end
return n
";

impl RedisStore {
    fn day_key(&self, day: u64) -> String {
        self.key("spend", &day_name(day))
    }

    pub(super) async fn write_spend(&self, s: &SessionSpend) -> Result<(), FleetError> {
        let mut by_day: std::collections::BTreeMap<u64, Vec<(String, String)>> = Default::default();
        for (day, field, value) in s.fields() {
            by_day.entry(day).or_default().push((field, value));
        }
        if by_day.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for (day, fields) in &by_day {
            let key = self.day_key(*day);
            pipe.hset_multiple(&key, fields)
                .ignore()
                .pexpire_at(&key, spend::expires_ms(*day) as i64)
                .ignore();
        }
        self.query::<()>(&pipe).await
    }

    pub(super) async fn read_spend(
        &self,
        days: RangeInclusive<u64>,
    ) -> Result<Vec<SpendEntry>, FleetError> {
        let days: Vec<u64> = days.collect();
        let mut pipe = redis::pipe();
        for day in &days {
            pipe.hgetall(self.day_key(*day));
        }
        let hashes: Vec<HashMap<String, String>> = self.query(&pipe).await?;
        let mut entries = Vec::new();
        let mut unread = 0;
        for (day, hash) in days.iter().zip(hashes) {
            for (field, value) in hash {
                match spend::decode(*day, &field, &value) {
                    Some(e) => entries.push(e),
                    None => unread += 1,
                }
            }
        }
        if unread > 0 {
            tracing::warn!(
                "{unread} spend field(s) in the fleet store could not be read and are not counted"
            );
        }
        Ok(entries)
    }

    pub(super) async fn close_spend_of(
        &self,
        host: &str,
        session: &str,
        providers: &[String],
        days: RangeInclusive<u64>,
    ) -> Result<(), FleetError> {
        if providers.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        let keys: Vec<String> = days.map(|d| self.day_key(d)).collect();
        pipe.cmd("EVAL").arg(CLOSE).arg(keys.len()).arg(&keys);
        for p in providers {
            pipe.arg(spend::field(host, session, p));
        }
        pipe.ignore();
        self.query::<()>(&pipe).await
    }
}
