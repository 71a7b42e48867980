//! The little calendar arithmetic sandguard needs: RFC 3339 timestamps to and from Unix
//! seconds (UTC only; offsets are applied), and the spans of time the tables print. Written
//! out here rather than pulling a date crate into every build.
//!
//! Two ways to write a span, each for its reader:
//! - [`format_uptime`], **every table's**: ages and time left in `ps` and `sessions`, sandbox
//!   time in `sessions`, `sessions show` and `report`. Two units, the largest that is not zero
//!   and the next, the second always in two digits: `42s`, `1m15s`, `1h01m`, `2d03h`. What is
//!   below the second unit is dropped, never rounded up, so a time is never shown longer
//!   than it was, and parts of 1m00s, 11s and 4s read as a total of `1m15s`, as a user adds
//!   them up (within one of the total's smaller unit: its seconds past an hour, its minutes
//!   past a day). Two units, because a third is noise next to the first (a second of an hour)
//!   and one alone drops up to half the figure (75 s read `1m`). No spaces inside: a table
//!   read by `awk` or `cut` keeps one word a cell.
//! - [`format_span`], a span as a config writes it (`1m30s`, `2h`), every non-zero unit: the
//!   limits and TTLs echoed back as the user set them.
//!
//! The wrapper's closing line is neither: it speaks sandbox-hours, -minutes or -seconds with a
//! decimal, each provider in the total's unit, so that its parts add up by eye in one unit
//! (`src/cli/watch/terminal.rs`).

/// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Parses `2024-05-01T12:34:56.789Z` or `…+02:00` into Unix seconds (fractions dropped).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, sec) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(frac.len());
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, om) = (
                rest.get(1..3)?.parse::<i64>().ok()?,
                rest.get(4..6)?.parse::<i64>().ok()?,
            );
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    Some(days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset)
}

/// Formats Unix seconds as `2024-05-01T12:34:56Z`.
pub fn format_rfc3339(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A span as every table writes it (see the module's docs): `42s`, `1m15s`, `1h01m`,
/// `2d03h`; a negative one (a clock that moved back) is `0s`.
pub(crate) fn format_uptime(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// A span as it is written in a config (`HumanDuration`): its non-zero parts, largest first,
/// to the second: `90s` is `1m30s`, two hours `2h`, nothing at all `0s`.
pub(crate) fn format_span(d: std::time::Duration) -> String {
    let s = d.as_secs();
    let parts = [
        (s / 86_400, "d"),
        (s % 86_400 / 3600, "h"),
        (s % 3600 / 60, "m"),
        (s % 60, "s"),
    ];
    let text: String = parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect();
    if text.is_empty() {
        "0s".into()
    } else {
        text
    }
}

/// The current Unix time in seconds.
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_written_as_a_config_writes_it() {
        let span = |s| format_span(std::time::Duration::from_secs(s));
        assert_eq!(span(0), "0s");
        assert_eq!(span(90), "1m30s");
        assert_eq!(span(7200), "2h");
        assert_eq!(span(86_400 + 61), "1d1m1s");
    }

    #[test]
    fn rfc3339_round_trips() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339("2024-02-29T12:00:00.123456789Z"),
            Some(1_709_208_000)
        );
        assert_eq!(
            parse_rfc3339("2024-02-29T14:00:00+02:00"),
            Some(1_709_208_000)
        );
        assert_eq!(format_rfc3339(1_709_208_000), "2024-02-29T12:00:00Z");
        for t in [0, 951_782_400, 1_709_208_000, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&format_rfc3339(t)), Some(t));
        }
        for bad in [
            "",
            "2024-02-29",
            "2024-13-01T00:00:00Z",
            "2024-02-29T12:00:00",
            "yesterday",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_table_span_keeps_two_units_and_drops_the_rest() {
        assert_eq!(format_uptime(42), "42s");
        assert_eq!(format_uptime(60), "1m00s");
        assert_eq!(format_uptime(5 * 60 + 59), "5m59s");
        assert_eq!(format_uptime(3600 + 60 + 59), "1h01m");
        assert_eq!(format_uptime(2 * 86_400 + 3 * 3600 + 59), "2d03h");
        assert_eq!(format_uptime(-5), "0s");
    }

    #[test]
    fn a_total_reads_as_its_parts_add_up() {
        // The case: 1 m + 11 s + 4 s was a total of `1m`.
        assert_eq!(format_uptime(60 + 11 + 4), "1m15s");
        // Parts in minutes and seconds, a total past the hour: within a minute.
        assert_eq!(format_uptime(2 * (30 * 60 + 30)), "1h01m");
    }
}
