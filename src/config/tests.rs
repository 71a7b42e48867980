//! Unit tests of the config: parsing, layering, and the errors that name file, line and key.

use super::file::{parse_file, FileConfig};
use super::*;
use std::collections::HashMap;
use std::path::Path;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn durations_read_the_human_way() {
    assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
    assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
    assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    assert_eq!(
        parse_duration("7d").unwrap(),
        Duration::from_secs(7 * 86_400)
    );
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    for bad in ["", "5", "s", "5x", "-5s", "5 s", "1.5h", "99999999999999d"] {
        assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn the_documented_example_parses_and_states_the_defaults() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/sandguard.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let file = parse_file(&path, &text).unwrap();
    let from_example =
        Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
    let defaults = Settings::layer(
        None,
        FileConfig::default(),
        &Overrides::default(),
        &env(&[("HOME", "/h")]),
    )
    .unwrap();
    // The example spells out the defaults, so reading it must change nothing.
    assert_eq!(format!("{from_example:?}"), format!("{defaults:?}"));
    // And it mentions every key the parser knows.
    for key in [
        "state_dir",
        "log_level",
        "[watch]",
        "grace",
        "[reclaim]",
        "concurrency",
        "deadline",
        "settle",
        "retry_initial",
        "retry_max",
        "[providers.docker]",
        "enabled",
        "host",
        "api_version",
        "timeout",
        "renew_every",
        "docker_proxy",
        "cloud_proxy",
        "keep_ryuk",
        "[sweep]",
        "prune_after",
        "rate",
        "[providers.e2b]",
        "[providers.daytona]",
        "[providers.flyio]",
        "[providers.tenki]",
        "[providers.modal]",
        "api_key",
        "api_url",
        "api_token",
        "app",
        "api_hostname",
        "token_id",
        "token_secret",
        "server_url",
        "command",
        "[fleet]",
        "store",
        "lease",
        "prefix",
        "[host]",
        "id =",
        "SANDGUARD_FLEET_STORE",
        "SANDGUARD_FLEET_PASSWORD",
        "SANDGUARD_HOST_ID",
        "[limits]",
        "sandboxes =",
        "creates =",
        "lifetime =",
        "spend =",
        "on_spend =",
        "[notify]",
        "webhook =",
        "attempts =",
        "detached_after =",
        "[providers.e2b.limits]",
        "price_per_hour",
        "[providers.e2b.prices]",
        "[providers.daytona.prices]",
    ] {
        assert!(
            text.contains(key),
            "config/sandguard.toml does not document {key}"
        );
    }
}

#[test]
fn prices_come_per_provider_and_per_size_and_a_bad_one_names_file_line_and_key() {
    use crate::ledger::price::Prices;
    let path = Path::new("/etc/x.toml");
    let prices = |text: &str| -> Prices {
        let file = parse_file(path, text).unwrap();
        Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")]))
            .unwrap()
            .prices
    };
    let p = prices(
        "[providers.e2b]\nprice_per_hour = 0.05\n[providers.e2b.prices]\nbase = 0.1\n\
         \"gpu-large\" = 2\n[providers.daytona.prices]\nsmall = 0.02\n\
         [providers.docker]\nprice_per_hour = 0\n[providers.acme]\nprice_per_hour = 1.5\n",
    );
    assert_eq!(p.per_hour("e2b", Some("gpu-large")), Some(2.0));
    assert_eq!(p.per_hour("e2b", Some("other")), Some(0.05));
    assert_eq!(p.per_hour("daytona", Some("small")), Some(0.02));
    assert_eq!(p.per_hour("daytona", None), None);
    assert_eq!(p.per_hour("docker", None), Some(0.0), "free is a price");
    assert_eq!(p.per_hour("acme", None), Some(1.5), "a plugin's");
    assert_eq!(prices(""), Prices::default());

    let err = |text: &str| parse_file(path, text).unwrap_err().to_string();
    let e = err("[providers.e2b]\ntimeout = \"5s\"\nprice_per_hour = -1\n");
    assert!(
        e.starts_with("/etc/x.toml:3: key `providers.e2b.price_per_hour`"),
        "{e}"
    );
    assert!(e.contains("a number 0 or more"), "{e}");
    let e = err("[providers.e2b.prices]\nbase = \"cheap\"\n");
    assert!(
        e.starts_with("/etc/x.toml:2: key `providers.e2b.prices.base`"),
        "{e}"
    );
    let e = err("[providers.docker]\nprice_per_hour = 1\nprices = { base = 1 }\n");
    assert!(
        e.starts_with("/etc/x.toml:3: key `providers.docker.prices`"),
        "{e}"
    );
    let e = err("[providers.tenki.prices]\nbig = 1\n");
    assert!(e.contains("only e2b and daytona take prices"), "{e}");
    let e = err("[providers.e2b]\nprice_per_hours = 1\n");
    assert!(
        e.starts_with("/etc/x.toml:2: key `providers.e2b.price_per_hours`"),
        "{e}"
    );
}

#[test]
fn limits_come_from_the_file_and_each_flag_beats_its_key() {
    let text = "[limits]\nsandboxes = 10\ncreates = 50\nlifetime = \"2h\"\nspend = \"20h\"\non_spend = \"reclaim\"\n";
    let path = Path::new("/etc/x.toml");
    let layer = |flags: crate::budget::Limits| {
        let file = parse_file(path, text).unwrap();
        let overrides = Overrides {
            limits: flags,
            ..Overrides::default()
        };
        Settings::layer(None, file, &overrides, &env(&[("HOME", "/h")]))
            .unwrap()
            .limits
    };
    let from_file = layer(Default::default());
    assert_eq!(
        (from_file.sandboxes, from_file.creates, from_file.lifetime),
        (Some(10), Some(50), Some(Duration::from_secs(7200)))
    );
    let flagged = layer(crate::budget::Limits {
        sandboxes: Some(2),
        creates: None,
        lifetime: Some(Duration::from_secs(60)),
        ..Default::default()
    });
    assert_eq!(
        (flagged.sandboxes, flagged.creates, flagged.lifetime),
        (Some(2), Some(50), Some(Duration::from_secs(60)))
    );
    assert_eq!(
        (flagged.spend, flagged.on_spend),
        (
            Some(crate::budget::Spend::Time(Duration::from_secs(20 * 3600))),
            Some(crate::budget::OnSpend::Reclaim)
        )
    );
    let err = parse_file(path, "[limits]\nsandbox = 3\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/x.toml:2: key `limits.sandbox`"),
        "{err}"
    );
    let err = parse_file(path, "[limits]\nsandboxes = -1\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/x.toml:2: key `limits.sandboxes`"),
        "{err}"
    );
    let err = parse_file(path, "[limits]\non_spend = \"stop\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/x.toml:2: key `limits.on_spend`"),
        "{err}"
    );
    let err = parse_file(path, "[limits]\nlifetime = \"0s\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/x.toml:2: key `limits.lifetime`"),
        "{err}"
    );
}

#[test]
fn an_unknown_key_names_file_line_and_key() {
    let text = "[watch]\ngrace = \"5m\"\n\n[reclaim]\nconcurency = 4\n";
    let err = parse_file(Path::new("/etc/x.toml"), text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/x.toml:5: key `reclaim.concurency`"),
        "{err}"
    );
}

#[test]
fn a_bad_value_names_file_line_and_key() {
    let text = "log_level = \"info\"\n[reclaim]\ndeadline = \"2 minutes\"\n";
    let err = parse_file(Path::new("c.toml"), text)
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("c.toml:3: key `reclaim.deadline`"), "{err}");
    assert!(err.contains("invalid duration"), "{err}");
    let err = parse_file(Path::new("c.toml"), "[reclaim]\nconcurrency = 0\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("c.toml:2: key `reclaim.concurrency`"),
        "{err}"
    );
}

#[test]
fn flags_beat_env_beat_file_beat_defaults() {
    let file = parse_file(Path::new("c"), "[watch]\ngrace = \"1m\"\n").unwrap();
    let e = env(&[("SANDGUARD_GRACE", "2m"), ("HOME", "/h")]);
    let flags = Overrides {
        grace: Some(Duration::from_secs(180)),
        ..Default::default()
    };
    let s = Settings::layer(None, file, &flags, &e).unwrap();
    assert_eq!(s.watch.grace, Duration::from_secs(180));

    let file = parse_file(Path::new("c"), "[watch]\ngrace = \"1m\"\n").unwrap();
    let s = Settings::layer(None, file, &Overrides::default(), &e).unwrap();
    assert_eq!(s.watch.grace, Duration::from_secs(120));

    let file = parse_file(Path::new("c"), "[watch]\ngrace = \"1m\"\n").unwrap();
    let s = Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
    assert_eq!(s.watch.grace, Duration::from_secs(60));
    assert_eq!(s.state_dir, PathBuf::from("/h/.local/state/sandguard"));
}

#[test]
fn a_bad_environment_value_is_named() {
    let e = env(&[("SANDGUARD_GRACE", "soon")]);
    let err = Settings::layer(None, FileConfig::default(), &Overrides::default(), &e).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("environment variable SANDGUARD_GRACE:"),
        "{err}"
    );
}

#[test]
fn any_other_provider_table_is_a_plugin_with_command_and_timeout_only() {
    let text = "[providers.docker]\nenabled = false\n\n[providers.acme]\ncommand = [\"/opt/acme\", \"--fast\"]\ntimeout = \"5s\"\n\n[providers.zed]\n";
    let file = parse_file(Path::new("c.toml"), text).unwrap();
    let s = Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
    assert_eq!(s.docker.enabled, Some(false));
    assert_eq!(
        s.plugins,
        vec![
            PluginSettings {
                name: "acme".into(),
                command: Some(vec!["/opt/acme".into(), "--fast".into()]),
                timeout: Duration::from_secs(5),
                rate: None,
            },
            PluginSettings {
                name: "zed".into(),
                command: None,
                timeout: Duration::from_secs(30),
                rate: None,
            },
        ]
    );
}

#[test]
fn a_plugin_table_denies_unknown_keys_and_names_file_line_and_key() {
    let text = "[providers.acme]\ncommand = [\"/opt/acme\"]\napi_key = \"k\"\n";
    let err = parse_file(Path::new("c.toml"), text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("c.toml:3: key `providers.acme.api_key`"),
        "{err}"
    );
    let text = "[providers.docker]\nenabld = false\n";
    let err = parse_file(Path::new("c.toml"), text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("c.toml:2: key `providers.docker.enabld`"),
        "{err}"
    );
    let text = "[providers.acme]\ncommand = []\n";
    let err = parse_file(Path::new("c.toml"), text)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("c.toml:2: key `providers.acme.command`"),
        "{err}"
    );
    let text = "[providers.Acme]\ncommand = [\"x\"]\n";
    let err = parse_file(Path::new("c.toml"), text)
        .unwrap_err()
        .to_string();
    assert!(err.contains("invalid provider name \"Acme\""), "{err}");
}

#[test]
fn values_that_make_no_sense_name_file_line_and_key() {
    for (text, at) in [
        ("[watch]\ngrace = \"0\"\n", "c.toml:2: key `watch.grace`"),
        (
            "[reclaim]\ndeadline = \"0\"\n",
            "c.toml:2: key `reclaim.deadline`",
        ),
        (
            "[reclaim]\nretry_initial = \"0\"\n",
            "c.toml:2: key `reclaim.retry_initial`",
        ),
        (
            "[reclaim]\nretry_initial = \"5s\"\nretry_max = \"1s\"\n",
            "c.toml:3: key `reclaim.retry_max`",
        ),
        (
            "[providers.e2b]\ntimeout = \"0\"\n",
            "c.toml:2: key `providers.e2b.timeout`",
        ),
        (
            "state_dir = \"relative/dir\"\n",
            "c.toml:1: key `state_dir`",
        ),
        ("state_dir = \"~bob/x\"\n", "c.toml:1: key `state_dir`"),
    ] {
        let err = parse_file(Path::new("c.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(at), "{text:?}: {err}");
    }
    let e = env(&[("SANDGUARD_GRACE", "0"), ("HOME", "/h")]);
    let err = Settings::layer(None, FileConfig::default(), &Overrides::default(), &e);
    assert!(err.unwrap_err().to_string().contains("SANDGUARD_GRACE"));
}

#[test]
fn a_tilde_state_dir_is_the_home_directory() {
    let file = parse_file(Path::new("c"), "state_dir = \"~/.sg\"\n").unwrap();
    let s = Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
    assert_eq!(s.state_dir, PathBuf::from("/h/.sg"));
    let e = env(&[("HOME", "/h"), ("SANDGUARD_STATE_DIR", "rel")]);
    let err = Settings::layer(None, FileConfig::default(), &Overrides::default(), &e);
    assert!(err.unwrap_err().to_string().contains("SANDGUARD_STATE_DIR"));
}

#[test]
fn secrets_never_print() {
    let s = Secret::new("e2b_0123456789abcdef");
    assert_eq!(format!("{s} {s:?}"), "[redacted] [redacted]");
    assert_eq!(s.expose(), "e2b_0123456789abcdef");
}

#[test]
fn the_e2b_url_is_the_explicit_one_else_the_domain_s_api() {
    let url = |file: &str, vars: &[(&str, &str)]| {
        let file = parse_file(Path::new("c.toml"), file).unwrap();
        let mut vars = vars.to_vec();
        vars.push(("HOME", "/h"));
        Settings::layer(None, file, &Overrides::default(), &env(&vars))
            .unwrap()
            .e2b
            .url
    };
    let file = "[providers.e2b]\napi_url = \"https://file.example\"\n";
    assert_eq!(url("", &[]), "https://api.e2b.app");
    assert_eq!(
        url("", &[("E2B_DOMAIN", "example.test")]),
        "https://api.example.test"
    );
    assert_eq!(url("", &[("E2B_DOMAIN", "")]), "https://api.e2b.app");
    assert_eq!(
        url(file, &[("E2B_DOMAIN", "example.test")]),
        "https://file.example"
    );
    let both = [
        ("E2B_DOMAIN", "example.test"),
        ("E2B_API_URL", "http://127.0.0.1:9"),
    ];
    assert_eq!(url(file, &both), "http://127.0.0.1:9");
    assert_eq!(url("", &[("E2B_DEBUG", "true")]), "https://api.e2b.app");
}

#[test]
fn the_fleet_store_comes_from_env_or_file_and_never_prints_its_password() {
    let text = "[fleet]\nstore = \"redis://u:pw@file:6379\"\nlease = \"9s\"\n[host]\nid = \"a\"\n";
    let file = parse_file(Path::new("c.toml"), text).unwrap();
    let e = env(&[("HOME", "/h")]);
    let s = Settings::layer(None, file, &Overrides::default(), &e).unwrap();
    let f = s.fleet.as_ref().unwrap();
    assert_eq!(f.lease, Duration::from_secs(9));
    assert_eq!(f.prefix, "sandguard");
    assert_eq!(f.display(), "redis://u:[redacted]@file:6379");
    assert_eq!(s.host.id.as_deref(), Some("a"));
    assert!(!format!("{s:?}").contains("pw@"), "{s:?}");

    let file = parse_file(Path::new("c.toml"), text).unwrap();
    let e = env(&[
        ("HOME", "/h"),
        ("SANDGUARD_FLEET_STORE", "rediss://env:1"),
        ("SANDGUARD_FLEET_PASSWORD", "from-env"),
        ("SANDGUARD_HOST_ID", "b"),
    ]);
    let s = Settings::layer(None, file, &Overrides::default(), &e).unwrap();
    let f = s.fleet.as_ref().unwrap();
    assert_eq!(f.display(), "rediss://env:1");
    assert_eq!(f.password.as_ref().map(Secret::expose), Some("from-env"));
    assert!(!format!("{s:?}").contains("from-env"));
    assert_eq!(s.host.id.as_deref(), Some("b"));

    let none = Settings::layer(
        None,
        FileConfig::default(),
        &Overrides::default(),
        &env(&[]),
    );
    assert!(none.unwrap().fleet.is_none());
}

#[test]
fn a_bad_fleet_key_names_file_line_and_key() {
    for (text, at) in [
        (
            "[fleet]\nstore = \"localhost:6379\"\n",
            "c.toml:2: key `fleet.store`",
        ),
        (
            "[fleet]\nlease = \"500ms\"\n",
            "c.toml:2: key `fleet.lease`",
        ),
        (
            "[fleet]\nprefix = \"a b\"\n",
            "c.toml:2: key `fleet.prefix`",
        ),
        ("[fleet]\nstores = \"x\"\n", "c.toml:2: key `fleet.stores`"),
        ("[host]\nname = \"x\"\n", "c.toml:2: key `host.name`"),
    ] {
        let err = parse_file(Path::new("c.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with(at), "{text:?}: {err}");
    }
    let err = parse_file(
        Path::new("c.toml"),
        "[fleet]\nstore = \"http://u:s3cret@h\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(!err.contains("s3cret"), "{err}");
    let e = env(&[("SANDGUARD_FLEET_STORE", "nope")]);
    let err = Settings::layer(None, FileConfig::default(), &Overrides::default(), &e);
    assert!(err
        .unwrap_err()
        .to_string()
        .starts_with("environment variable SANDGUARD_FLEET_STORE:"));
}

#[test]
fn docker_removes_as_many_at_once_as_its_cli_unless_concurrency_is_set() {
    let e = env(&[("HOME", "/h")]);
    let unset = Settings::layer(
        None,
        parse_file(Path::new("c"), "").unwrap(),
        &Overrides::default(),
        &e,
    )
    .unwrap();
    let options = crate::reclaim::Options::from(&unset.reclaim);
    assert_eq!(options.window("docker"), super::DOCKER_WINDOW);
    assert_eq!(
        options.window("e2b"),
        16,
        "cloud providers keep the polite default"
    );

    let file = parse_file(Path::new("c"), "[reclaim]\nconcurrency = 8\n").unwrap();
    let set = Settings::layer(None, file, &Overrides::default(), &e).unwrap();
    let options = crate::reclaim::Options::from(&set.reclaim);
    assert_eq!(
        options.window("docker"),
        8,
        "a set concurrency applies to Docker too"
    );
    assert_eq!(options.window("e2b"), 8);
}

#[test]
fn a_providers_limits_are_its_own_table_and_on_spend_is_the_sessions() {
    let text = "[providers.e2b.limits]\nsandboxes = 2\nspend = \"5h\"\n\n\
                [providers.docker.limits]\nlifetime = \"1h\"\n\n\
                [providers.acme]\ncommand = [\"acme-sandguard\"]\n[providers.acme.limits]\ncreates = 7\n";
    let path = Path::new("/etc/x.toml");
    let file = parse_file(path, text).unwrap();
    let settings =
        Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
    let budget = settings.budget();
    assert_eq!(budget.session, crate::budget::Limits::default());
    let e2b = budget.providers["e2b"];
    assert_eq!(
        (e2b.sandboxes, e2b.spend),
        (
            Some(2),
            Some(crate::budget::Spend::Time(Duration::from_secs(5 * 3600)))
        )
    );
    assert_eq!(budget.lifetime("docker"), Some(Duration::from_secs(3600)));
    assert_eq!(budget.providers["acme"].creates, Some(7));
    let money =
        "[providers.e2b]\nprice_per_hour = 0.1\n[providers.e2b.limits]\nspend = \"$2.50\"\n";
    let file = parse_file(path, money).unwrap();
    let settings =
        Settings::layer(None, file, &Overrides::default(), &env(&[("HOME", "/h")])).unwrap();
    assert_eq!(
        settings.budget().providers["e2b"].spend,
        Some(crate::budget::Spend::Cost(2.5))
    );
    assert!(settings.budget().unpriced().is_none());
    let unpriced = parse_file(path, "[limits]\nspend = \"$5\"\n").unwrap();
    let why = Settings::layer(
        None,
        unpriced,
        &Overrides::default(),
        &env(&[("HOME", "/h")]),
    )
    .expect_err("nothing prices it")
    .to_string();
    assert!(
        why.starts_with("limit `spend` is money ($5.00 estimated) but no price is set"),
        "{why}"
    );
    let err = parse_file(path, "[limits]\nspend = \"5 dollars\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/x.toml:2: key `limits.spend`"),
        "{err}"
    );
    let err = parse_file(path, "[providers.e2b.limits]\non_spend = \"reclaim\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/etc/x.toml:2: key `providers.e2b.limits.on_spend`"),
        "{err}"
    );
}
