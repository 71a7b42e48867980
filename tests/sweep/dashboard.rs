//! The Grafana dashboard, `packaging/grafana/sandguard.json`, against what the binary serves:
//! every metric its PromQL expressions name is in a real scrape of
//! `sweep --every 1s --metrics 127.0.0.1:PORT` (a histogram's `_bucket`, `_sum` and `_count`
//! as served), every label they group or match by is on that metric's series, and every
//! expression parses (Prometheus' own parser: `promtool check rules`). No Docker: plugin
//! providers make the activity that gives each family its series (an orphan reclaimed, a
//! removal that fails, a provider that cannot be listed, a pending session, a session's
//! sandbox time).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::journal::{start_line, write_journal};
use crate::support::plugin::{cmd, config, Plugin};
use crate::support::*;
use sandguard::labels::{OWNER, SESSION};

/// Words of PromQL that are neither metrics nor labels.
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];

/// Every series of one `GET /metrics` at `addr`: metric name → the label names it carries.
fn scrape(addr: &str) -> BTreeMap<String, BTreeSet<String>> {
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return BTreeMap::new();
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let ask = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(ask.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let mut series: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let labels = series.entry(line[..name_end].to_string()).or_default();
        if let Some(inner) = line[name_end..]
            .strip_prefix('{')
            .and_then(|r| r.split_once('}'))
        {
            labels.extend(
                inner
                    .0
                    .split(',')
                    .filter_map(|kv| Some(kv.split_once('=')?.0.into())),
            );
        }
    }
    series
}

/// One PromQL token: a name (a metric, a label, a function, a keyword, a `$variable`) or a
/// character; strings, `[ranges]` and numbers are left out.
#[derive(Debug, PartialEq)]
enum Token {
    Name(String),
    Char(char),
}

fn tokens(expr: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut chars = expr.chars().peekable();
    while let Some(c) = chars.next() {
        let name_char = |c: &char| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '$' | '.');
        match c {
            '"' | '\'' | '`' => while chars.next().is_some_and(|n| n != c) {},
            '[' => while chars.next().is_some_and(|n| n != ']') {},
            c if c.is_ascii_digit() => while chars.next_if(name_char).is_some() {},
            c if name_char(&c) => {
                let mut name = c.to_string();
                while let Some(n) = chars.next_if(name_char) {
                    name.push(n);
                }
                out.push(Token::Name(name));
            }
            c if c.is_whitespace() => {}
            c => out.push(Token::Char(c)),
        }
    }
    out
}

/// The metric names and the label names (matched or grouped by) of one PromQL expression.
fn names(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    const GROUPINGS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let (mut metrics, mut labels) = (BTreeSet::new(), BTreeSet::new());
    let tokens = tokens(expr);
    let mut i = 0;
    while i < tokens.len() {
        let next = tokens.get(i + 1);
        match &tokens[i] {
            // A grouping's labels, up to its `)`; a matcher's labels, up to its `}`.
            Token::Name(n)
                if GROUPINGS.contains(&n.as_str()) && next == Some(&Token::Char('(')) =>
            {
                while tokens.get(i).is_some_and(|t| *t != Token::Char(')')) {
                    if let Token::Name(l) = &tokens[i] {
                        if !GROUPINGS.contains(&l.as_str()) {
                            labels.insert(l.clone());
                        }
                    }
                    i += 1;
                }
            }
            Token::Char('{') => {
                while tokens.get(i).is_some_and(|t| *t != Token::Char('}')) {
                    if let Token::Name(l) = &tokens[i] {
                        labels.insert(l.clone());
                    }
                    i += 1;
                }
            }
            // A name called (`rate(`), or an aggregation with its grouping first
            // (`sum by (…) (…)`), is not a metric.
            Token::Name(n)
                if next != Some(&Token::Char('('))
                    && !matches!(next, Some(Token::Name(g)) if GROUPINGS.contains(&g.as_str()))
                    && !n.starts_with('$')
                    && !KEYWORDS.contains(&n.as_str()) =>
            {
                metrics.insert(n.clone());
            }
            _ => {}
        }
        i += 1;
    }
    (metrics, labels)
}

#[test]
fn promql_names_are_told_apart() {
    let (m, l) = names(concat!(
        r#"histogram_quantile(0.95, sum by (le) "#,
        r#"(rate(sandguard_sweep_pass_duration_seconds_bucket{host=~"$host"}[$__rate_interval])))"#
    ));
    assert_eq!(
        m,
        BTreeSet::from(["sandguard_sweep_pass_duration_seconds_bucket".into()])
    );
    assert_eq!(l, BTreeSet::from(["host".into(), "le".into()]));
    let (m, l) = names("time() - max by (host) (a_seconds) > 3 * on (host) b_seconds offset 5m");
    assert_eq!(m, BTreeSet::from(["a_seconds".into(), "b_seconds".into()]));
    assert_eq!(l, BTreeSet::from(["host".into()]));
}

/// Every PromQL expression of the dashboard: its panels' targets' `expr`, and the metric of a
/// variable's `label_values(METRIC, LABEL)` query (as `METRIC`, `by (LABEL)`).
fn expressions(dashboard: &serde_json::Value) -> Vec<String> {
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    match (k.as_str(), v.as_str()) {
                        ("expr", Some(e)) => out.push(e.to_string()),
                        ("query" | "definition", Some(q)) if q.starts_with("label_values(") => {
                            let args = &q["label_values(".len()..q.len() - 1];
                            let (metric, label) = args.split_once(',').expect("two arguments");
                            out.push(format!("sum by ({}) ({})", label.trim(), metric.trim()));
                        }
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    out
}

/// A sweep service over plugin providers whose passes give every family of metrics a series:
/// `acme` lists an orphan of a dead owner (reclaimed), another whose removal fails, and the
/// sandbox of a pending session; `down` cannot be listed. Its address.
fn busy_service(s: &Scratch) -> (Background, String) {
    let (acme, down) = (Plugin::new(s, "acme"), Plugin::new(s, "down"));
    down.set_list(Some("down"));
    let dead = dead_owner_label();
    let orphans = format!("orphans{}", unique());
    for id in ["orphan", "stuck"] {
        acme.insert(id, &[(SESSION, orphans.as_str()), (OWNER, dead.as_str())]);
    }
    acme.set_mode("stuck", Some("fatal"));
    let pending = format!("pending{}", unique());
    acme.insert(
        "held",
        &[(SESSION, pending.as_str()), (OWNER, dead.as_str())],
    );
    acme.set_mode("held", Some("fatal"));
    let t0 = (sandguard::testing::timefmt::now_unix() - 60) * 1000;
    let record = |ev: &str, rest: &str| format!(r#"{{"t":{t0},"ev":"{ev}",{rest}}}"#);
    let held = r#""provider":"acme","id":"held""#;
    write_journal(
        s,
        &pending,
        &[
            start_line(t0, &dead),
            record("claim", held),
            record(
                "failed",
                &format!(r#"{held},"error":"quota says no","pending":true"#),
            ),
            record("end", r#""state":"pending""#),
        ],
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let config = config(s, "1s", &[&acme, &down]);
    let service =
        Background::start(cmd(s, &config).args(["sweep", "--every", "1s", "--metrics", &addr]));
    (service, addr)
}

/// A session that used 30 s of acme's time, written once the service runs (what its first
/// look found is its baseline, and not counted).
fn a_session_that_used_time(s: &Scratch) {
    let t0 = sandguard::testing::timefmt::now_unix() * 1000;
    let (t1, id) = (t0 + 30_000, r#""provider":"acme","id":"timed""#);
    let session = format!("timed{}", unique());
    write_journal(
        s,
        &session,
        &[
            start_line(t0, "0123456789abcdef-0123456789abcdef-4242-1-4026531836"),
            format!(r#"{{"t":{t0},"ev":"claim",{id}}}"#),
            format!(r#"{{"t":{t1},"ev":"removed",{id},"outcome":"removed"}}"#),
            format!(r#"{{"t":{t1},"ev":"end","state":"clean"}}"#),
        ],
    );
}

#[test]
fn the_dashboard_queries_only_what_the_sweep_serves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("packaging/grafana/sandguard.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("the dashboard, {}: {e}", path.display()));
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exprs = expressions(&dashboard);
    assert!(exprs.len() >= 6, "the dashboard's expressions: {exprs:?}");
    let wanted: Vec<(String, BTreeSet<String>, BTreeSet<String>)> = exprs
        .iter()
        .map(|e| {
            let (m, l) = names(e);
            (e.clone(), m, l)
        })
        .collect();

    let s = Scratch::new("dashboard");
    let (_service, addr) = busy_service(&s);
    eventually(Duration::from_secs(10), "the first pass is served", || {
        scrape(&addr).contains_key("sandguard_sweep_last_pass_timestamp_seconds")
    });
    a_session_that_used_time(&s);
    // What is missing, once every family had the time of a few passes to get its series.
    let missing = |served: &BTreeMap<String, BTreeSet<String>>| -> Vec<String> {
        let mut missing = Vec::new();
        for (expr, metrics, labels) in &wanted {
            let mut carried = BTreeSet::new();
            for m in metrics {
                match served.get(m) {
                    Some(l) => carried.extend(l.iter().cloned()),
                    None => missing.push(format!("{m} (in {expr})")),
                }
            }
            let unserved = labels.difference(&carried);
            missing.extend(unserved.map(|l| format!("label {l} on {metrics:?} (in {expr})")));
        }
        missing
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut served = scrape(&addr);
    while !missing(&served).is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(250));
        served = scrape(&addr);
    }
    assert!(
        missing(&served).is_empty(),
        "the dashboard asks for what the sweep does not serve:\n{}\nserved: {served:?}",
        missing(&served).join("\n")
    );
    promtool_parses(&s, &exprs);
}

/// Every expression parses as Prometheus parses it: as recording rules, `promtool check
/// rules`, Grafana's variables put back to values (`$__rate_interval` → `5m`, `$__range` →
/// `1d`, `$host` → `.*`).
fn promtool_parses(s: &Scratch, exprs: &[String]) {
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, e) in exprs.iter().enumerate() {
        let e = e
            .replace("$__rate_interval", "5m")
            .replace("$__interval", "1m")
            .replace("$__range", "1d")
            .replace("${host}", ".*")
            .replace("$host", ".*");
        assert!(
            !e.contains('$'),
            "a Grafana variable this check does not know: {e}"
        );
        let quoted = serde_json::to_string(&e).unwrap();
        rules.push_str(&format!(
            "      - record: sandguard_dashboard:expr_{i}\n        expr: {quoted}\n"
        ));
    }
    let file = s.file("dashboard-rules.yml", rules);
    let out = Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("promtool is needed: tests/run.sh installs it (Debian's prometheus package)");
    assert!(
        out.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
