//! Unit tests of `ids`: every provider's parser against the class of bad ids, and each
//! provider's own shape against ids it really makes.

use super::*;

/// Ids that no provider may ever accept.
const BAD: &[&str] = &[
    "", ".", "..", "/", "a/b", "../x", "x/..", "./", "%2e%2e", ".%2e", "%2E.", "a%2Fb", "a b",
    " a", "a\t", "a\n", "a\0", "-rf", "--help",
];

const SHAPES: [(&str, Shape); 6] = [
    ("e2b", E2B),
    ("daytona", DAYTONA),
    ("flyio", FLYIO),
    ("tenki", TENKI),
    ("modal", MODAL),
    ("acme", GENERIC),
];

#[test]
fn no_parser_accepts_an_id_of_the_bad_class() {
    for (provider, shape) in SHAPES {
        for id in BAD {
            let err = parse(provider, shape, id).expect_err(&format!("{provider} {id:?}"));
            assert!(
                err.0.starts_with(&format!("refusing {provider} id")),
                "{err}"
            );
        }
    }
}

#[test]
fn each_parser_accepts_its_providers_ids_and_no_other_shape() {
    let uuid = "3fa85f64-5717-4562-b3fc-2c963f66afa6";
    let cases: [(&str, Shape, &[&str], &[&str]); 6] = [
        (
            "e2b",
            E2B,
            &["ixz3h7y0r5b6n1m2k4p8q", "sb-e2b", "i1a2b3c4-emulator", "a"],
            &["_x", "a.b", "a:b", &"x".repeat(65)],
        ),
        (
            "daytona",
            DAYTONA,
            &[uuid, "3FA85F64-5717-4562-B3FC-2C963F66AFA6"],
            &[
                "my-sandbox",
                "sandbox123",
                "3fa85f64-5717-4562-b3fc-2c963f66afa",
                "3fa85f6457174562b3fc2c963f66afa6",
            ],
        ),
        (
            "flyio",
            FLYIO,
            &["73d8d46dbee589", "0000000000dead"],
            &["73D8D46DBEE589", "machine-1", "g1", &"a".repeat(33)],
        ),
        ("tenki", TENKI, &[uuid], &["session-1", "00000000"]),
        (
            "modal",
            MODAL,
            &["sb-0000000000000000000dead", "sb-0000000000000000000001V"],
            &["sb-", "ta-123", "sb-a_b", "sb-a-b", "SB-abc"],
        ),
        (
            "acme",
            GENERIC,
            &["p1", "box-1", "a.b", "ns:name_1", "e-orphan"],
            &[".hidden", "_x", "a@b", "a,b", &"x".repeat(129)],
        ),
    ];
    for (provider, shape, good, bad) in cases {
        for id in good {
            let s = parse(provider, shape, id).unwrap_or_else(|e| panic!("{provider} {id}: {e}"));
            assert_eq!((s.provider.as_str(), s.id.as_str()), (provider, *id));
            assert_eq!(s.kind, Kind::Instance);
        }
        for id in bad {
            assert!(
                parse(provider, shape, id).is_err(),
                "{provider} accepted {id:?}"
            );
        }
    }
}

#[test]
fn a_refusal_says_what_the_id_should_be_and_escapes_what_it_was() {
    let err = parse("daytona", DAYTONA, "my-sandbox").unwrap_err();
    assert_eq!(
        err.0,
        r#"refusing daytona id "my-sandbox": a daytona id is a UUID"#
    );
    let err = parse("flyio", FLYIO, "..").unwrap_err();
    assert_eq!(
        err.0,
        r#"refusing flyio id "..": an id is never '.' or '..'"#
    );
    let err = parse("e2b", E2B, "a\u{1b}[31m").unwrap_err();
    assert!(!err.0.contains('\u{1b}'), "{err}");
}

#[test]
fn a_claim_for_a_provider_without_a_driver_is_refused_only_when_no_provider_could_read_it() {
    for id in ["abc", "network/0123456789ab", "volume/data.1", "sb-1"] {
        assert_eq!(unknown_provider_refusal(id), None, "{id}");
    }
    for id in [
        "",
        ".",
        "..",
        "/",
        "network/",
        "network/..",
        "a//b",
        "../x",
        "a b",
        "%2e%2e",
    ] {
        assert!(unknown_provider_refusal(id).is_some(), "{id:?}");
    }
}

/// Journal reads: a journaled claim (written by an older binary, or by hand) is read back
/// through its provider's parser by [`crate::reclaim::Plan::for_session`]; one no parser
/// accepts is refused there, never planned for removal.
#[test]
fn journaled_claims_are_parsed_again_when_a_reclaim_is_planned() {
    use crate::protocol::Target;
    use std::sync::Arc;
    let plugin = crate::providers::plugin::Plugin::new(
        "acme",
        vec!["/bin/false".into()],
        std::time::Duration::from_secs(1),
    );
    let providers: Vec<Arc<dyn crate::providers::Provider>> = vec![Arc::new(plugin)];
    let t = |provider: &str, id: &str| Target {
        provider: provider.into(),
        id: id.into(),
    };
    let claims = [
        t("acme", "box-1"),
        t("acme", ".."),
        t("acme", "a/b"),
        t("acme", ""),
        t("gone", "network/0123456789ab"),
        t("gone", ".."),
        t("gone", "x/../y"),
    ];
    let known = Arc::new(crate::ownership::known::Known::lazy(None, &providers));
    let plan = crate::reclaim::Plan::for_session("s", &providers, (&claims, &[]), known);
    let planned: Vec<(&str, &str)> = plan
        .claims
        .iter()
        .map(|s| (s.provider.as_str(), s.id.as_str()))
        .collect();
    assert_eq!(
        planned,
        [("acme", "box-1"), ("gone", "network/0123456789ab")]
    );
    let refused: Vec<&str> = plan.refused.iter().map(|(s, _)| s.id.as_str()).collect();
    assert_eq!(refused, ["..", "a/b", "", "..", "x/../y"]);
}
