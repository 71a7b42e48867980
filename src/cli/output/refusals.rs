//! The creates a session's limits refused, as `sessions show` and `report` print them (text
//! and `--json`), from the ledger's [`RefusedCreates`] and [`RefusedRow`].
//!
//! Decisions:
//! - **Their own lines, not sandboxes.** A refused create made nothing: `sessions show`
//!   tells them under the sandboxes' table, one line per provider and limit (`docker: 20
//!   create(s) refused by limit `sandboxes` (at most 1, reached at 1), from … to …; the
//!   first: image busybox`), and `report` in a table of its own under the time's
//!   (`Creates refused by a limit, by provider:`); a session or a report with none prints
//!   nothing more than before.
//! - **`--json` keeps its shape**: `sessions show --json` always has `refused_creates` (an
//!   empty list when none), each with `provider`, `limit`, `max`, `reached` (the limit and
//!   the count that reached it, as the refusal words them: strings, since a spend is `4s of
//!   sandbox time` or `$3.00 estimated`), `creates` (how many), `first_at` and `last_at`
//!   (RFC 3339) and `create` (what the first refused create named: `image`, `template`,
//!   `snapshot`; `{}` when it named nothing the proxy keeps). `report --json` has
//!   `refused_creates` rows (`key`, as the time's rows are keyed, `provider`, `limit`,
//!   `creates`), except with `--fleet`, whose store keeps no refusals.
//! - Every name in them came from a program or a config: escaped before a terminal sees it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{sanitize, table};
use crate::ledger::spend::RefusedRow;
use crate::ledger::story::RefusedCreates;

/// One provider's creates one limit refused in a session, in `sessions show --json`.
#[derive(Debug, Serialize)]
pub(in crate::cli) struct RefusedCreatesJson {
    provider: String,
    limit: String,
    max: String,
    reached: String,
    creates: u64,
    first_at: String,
    last_at: String,
    create: BTreeMap<String, String>,
}

impl From<&RefusedCreates> for RefusedCreatesJson {
    fn from(r: &RefusedCreates) -> RefusedCreatesJson {
        RefusedCreatesJson {
            provider: r.provider.clone(),
            limit: r.limit.clone(),
            max: r.max.clone(),
            reached: r.reached.clone(),
            creates: r.count,
            first_at: rfc3339(r.first_ms),
            last_at: rfc3339(r.last_ms),
            create: r.create.clone(),
        }
    }
}

/// One row of `report --json`'s `refused_creates`.
#[derive(Debug, Serialize)]
pub(in crate::cli) struct RefusedRowJson {
    key: String,
    provider: String,
    limit: String,
    creates: u64,
}

impl From<&RefusedRow> for RefusedRowJson {
    fn from(r: &RefusedRow) -> RefusedRowJson {
        RefusedRowJson {
            key: r.key.clone(),
            provider: r.provider.clone(),
            limit: r.limit.clone(),
            creates: r.creates,
        }
    }
}

fn rfc3339(ms: u64) -> String {
    crate::timefmt::format_rfc3339((ms / 1000) as i64)
}

/// `sessions show`'s lines for a session's refused creates; empty when there were none.
pub(in crate::cli) fn show_lines(refused: &[RefusedCreates]) -> String {
    if refused.is_empty() {
        return String::new();
    }
    let mut out = "Creates refused by a limit:\n".to_string();
    for r in refused {
        out.push_str(&format!(
            "  {}: {} create(s) refused by limit `{}` (at most {}, reached at {}), from {} to {}",
            sanitize(&r.provider),
            r.count,
            sanitize(&r.limit),
            sanitize(&r.max),
            sanitize(&r.reached),
            rfc3339(r.first_ms),
            rfc3339(r.last_ms),
        ));
        if !r.create.is_empty() {
            let named: Vec<String> = r
                .create
                .iter()
                .map(|(k, v)| format!("{} {}", sanitize(k), sanitize(v)))
                .collect();
            out.push_str(&format!("; the first: {}", named.join(", ")));
        }
        out.push('\n');
    }
    out
}

/// `report`'s table of refused creates, grouped as its rows are (`by`: `session`, `provider`,
/// `day`); empty when there were none.
pub(in crate::cli) fn report_table(rows: &[RefusedRow], by: &str) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let by_provider = by == "provider";
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let mut cells = vec![sanitize(&r.key).into_owned()];
            if !by_provider {
                cells.push(sanitize(&r.provider).into_owned());
            }
            cells.push(sanitize(&r.limit).into_owned());
            cells.push(r.creates.to_string());
            cells
        })
        .collect();
    let header = by.to_uppercase();
    let mut headers = vec![header.as_str()];
    if !by_provider {
        headers.push("PROVIDER");
    }
    headers.extend(["LIMIT", "REFUSED"]);
    let mut out = format!("Creates refused by a limit, by {by}:\n");
    out.push_str(&table(&headers, &cells));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_creates_print_per_provider_and_limit_and_nothing_when_none() {
        assert_eq!(show_lines(&[]), "");
        assert_eq!(report_table(&[], "provider"), "");
        let r = RefusedCreates {
            provider: "docker".into(),
            limit: "sandboxes".into(),
            max: "1".into(),
            reached: "1".into(),
            count: 20,
            first_ms: 0,
            last_ms: 61_000,
            create: BTreeMap::from([("image".to_string(), "busy\u{1b}box".to_string())]),
            steps: vec![],
        };
        let text = show_lines(std::slice::from_ref(&r));
        assert_eq!(
            text,
            "Creates refused by a limit:\n  docker: 20 create(s) refused by limit `sandboxes` \
             (at most 1, reached at 1), from 1970-01-01T00:00:00Z to 1970-01-01T00:01:01Z; \
             the first: image busy\\u{1b}box\n"
        );
        let json = serde_json::to_value(RefusedCreatesJson::from(&r)).unwrap();
        assert_eq!(
            json["create"]["image"], "busy\u{1b}box",
            "JSON has it as it is"
        );
        assert_eq!(json["creates"], 20);
        let rows = [RefusedRow {
            key: "s1".into(),
            provider: "e2b".into(),
            limit: "creates".into(),
            creates: 3,
        }];
        let table = report_table(&rows, "session");
        assert!(table.starts_with("Creates refused by a limit, by session:\nSESSION"));
        assert!(table.lines().nth(2).unwrap().ends_with("3"), "{table}");
    }
}
