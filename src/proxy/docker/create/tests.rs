//! Unit tests of [`super`]: stamping, commit scrubbing, named volumes and claims.

use super::*;

fn session() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("sandguard.session".to_string(), "s1".to_string()),
        ("sandguard.owner".to_string(), "o1".to_string()),
    ])
}

fn value(j: &Json) -> serde_json::Value {
    serde_json::from_slice(&j.to_vec()).unwrap()
}

#[test]
fn stamping_merges_every_labels_key_into_one() {
    let s = stamp(br#"{"Image":"x","Labels":{"a":"b"}}"#, &session())
        .unwrap()
        .0;
    let v = value(&s);
    assert_eq!(v["Labels"]["a"], "b");
    assert_eq!(v["Labels"]["sandguard.session"], "s1");
    assert_eq!(v["Image"], "x");
    let body = r#"{"Labels":{"a":"1","sandguard.session":"x"},"labels":{"a":"2","b":"3"},
        "LABELſ":{"sandguard.session":"evil","sandguard.owner":"evil"},"Image":"i"}"#;
    let s = stamp(body.as_bytes(), &session()).unwrap().0;
    let text = String::from_utf8(s.to_vec()).unwrap();
    assert_eq!(
        text,
        r#"{"Image":"i","Labels":{"a":"2","sandguard.session":"s1","b":"3","sandguard.owner":"o1"}}"#
    );
    // A later null resets the map, as in Go; the session's labels are still there.
    let s = stamp(br#"{"Labels":{"a":"1"},"labels":null}"#, &session())
        .unwrap()
        .0;
    assert_eq!(
        value(&s)["Labels"],
        serde_json::json!({"sandguard.owner":"o1","sandguard.session":"s1"})
    );
}

#[test]
fn stamping_what_go_reads_as_an_empty_config() {
    for body in [&b""[..], b"  \n", b"null", b" null\n"] {
        let s = stamp(body, &session()).unwrap().0;
        assert_eq!(value(&s)["Labels"]["sandguard.session"], "s1", "{body:?}");
    }
}

#[test]
fn bodies_that_cannot_be_stamped() {
    for body in [
        &b"[1,2]"[..],
        b"\"x\"",
        b"{not json",
        b"{} {}",
        b"{\"a\":\"\\ud800\"}",
        b"{\"a\":\"\xff\"}",
        br#"{"Labels":"x"}"#,
        br#"{"Labels":{},"labels":[]}"#,
    ] {
        assert!(stamp(body, &session()).is_err(), "{body:?}");
    }
}

#[test]
fn the_rest_of_the_body_is_kept_as_it_was() {
    let body = r#"{"Image":"x","Memory":9007199254740993,"NanoCpus":-1,"Env":["A=é\u0000"],"Cmd":null,"Image":"y","HostConfig":{"Binds":[]}}"#;
    let s = stamp(body.as_bytes(), &session()).unwrap().0;
    let text = String::from_utf8(s.to_vec()).unwrap();
    assert!(text.starts_with(
        r#"{"Image":"x","Memory":9007199254740993,"NanoCpus":-1,"Env":["A=é\u0000"],"Cmd":null,"Image":"y","HostConfig":{"Binds":[]},"Labels":{"#
    ), "{text}");
}

#[test]
fn commits_lose_sandguard_labels() {
    let body = br#"{"Labels":{"keep":"1","sandguard.session":"s"},"labels":{"Sandguard.Detached":"true"}}"#;
    let out: serde_json::Value = serde_json::from_slice(&scrub_commit(body).unwrap()).unwrap();
    assert_eq!(out, serde_json::json!({"Labels": {"keep": "1"}}));
    for body in [&b""[..], b"null", br#"{"Cmd":["x"]}"#] {
        assert_eq!(scrub_commit(body).unwrap(), body);
    }
    assert!(scrub_commit(b"[1]").is_err());
    for key in [
        labels::SESSION,
        labels::OWNER,
        labels::EXPIRES,
        labels::DETACHED,
    ] {
        assert!(COMMIT_CHANGE.contains(&format!(r#" {key}="""#)), "{key}");
    }
}

#[test]
fn commit_targets_gain_one_change() {
    let enc = "changes=LABEL%20sandguard.session%3D%22%22%20sandguard.owner%3D%22%22%20sandguard.expires%3D%22%22%20sandguard.detached%3D%22%22";
    assert_eq!(commit_target("/commit"), format!("/commit?{enc}"));
    assert_eq!(
        commit_target("/v1.41/commit?container=c&changes=ENV%20A%3D1"),
        format!("/v1.41/commit?container=c&changes=ENV%20A%3D1&{enc}")
    );
    assert_eq!(commit_target("/commit?"), format!("/commit?{enc}"));
}

fn volumes(body: &str) -> Vec<Volume> {
    named_volumes(&Json::parse(body.as_bytes()).unwrap()).unwrap()
}

fn names(body: &str) -> Vec<String> {
    volumes(body).into_iter().map(|v| v.name).collect()
}

#[test]
fn named_volumes_of_binds_and_mounts() {
    let body = r#"{"HostConfig":{"VolumeDriver":"vd","Binds":["data:/d","/host:/h","logs:/l:ro,z","/anon","x:/a:b:c",":/e"],
        "Mounts":[{"Type":"volume","Source":"m1","Target":"/m1","VolumeOptions":{"Labels":{"a":"b"},"DriverConfig":{"Name":"drv","Options":{"o":"1"}}}},
                  {"Type":"volume","Target":"/anon2"},{"Type":"bind","Source":"/x","Target":"/x"},{"Type":"volume","Source":"data","Target":"/d2"},
                  {"Type":"volume","Source":"m2","Target":"/m2"}]}}"#;
    let v = volumes(body);
    let got: Vec<&str> = v.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(got, ["data", "logs", "m1", "m2"]);
    assert_eq!(v[0].driver, "vd", "binds use HostConfig.VolumeDriver");
    assert_eq!(v[2].driver, "drv");
    assert_eq!(v[2].options, Some(vec![("o".into(), Json::str("1"))]));
    assert_eq!(v[2].labels, Some(vec![("a".into(), Json::str("b"))]));
    assert_eq!(v[3].driver, "", "mounts never use HostConfig.VolumeDriver");
    assert!(names(r#"{"Image":"x"}"#).is_empty());
    assert!(names(r#"{"HostConfig":null}"#).is_empty());
}

#[test]
fn named_volumes_are_read_as_go_reads_them() {
    // Keys fold, later keys win, null resets, a struct merges across keys.
    assert_eq!(
        names(r#"{"hostconfig":{"binds":["a:/a"]},"HOSTCONFIG":{"Mounts":null}}"#),
        ["a"]
    );
    assert_eq!(
        names(r#"{"HostConfig":{"Binds":["a:/a"],"Binds":["b:/b"]}}"#),
        ["b"]
    );
    assert!(names(r#"{"HostConfig":{"Binds":["a:/a"]},"HostConfig":null}"#).is_empty());
    assert!(names(r#"{"HostConfig":{"Binds":["a:/a"],"binds":null}}"#).is_empty());
    let split =
        r#"{"HostConfig":{"Mounts":[{"Type":"volume","Target":"/x"}],"mounts":[{"source":"s"}]}}"#;
    assert_eq!(names(split), ["s"], "elements merge across keys");
    let shown = r#"{"HostConfig":{"Mounts":[{"Type":"volume","Source":"s"}],"mounts":[],"MOUNTS":[{"Target":"/t"}]}}"#;
    assert_eq!(
        names(shown),
        ["s"],
        "an element from the backing array shows through"
    );
    assert_eq!(
        names(r#"{"HostConfig":{"Binds":["a:/a"]},"HostConfig":{"Binds":[null]}}"#),
        ["a"]
    );
    let long_s = r#"{"HostConfig":{"Mounts":[{"Type":"volume","ſource":"k"}]}}"#;
    assert_eq!(names(long_s), ["k"]);
    let bad = Json::parse(br#"{"HostConfig":{"Binds":"a:/a"}}"#).unwrap();
    assert!(named_volumes(&bad).is_err());
}

#[test]
fn volume_create_bodies() {
    let v = Volume {
        name: "n".into(),
        driver: "d".into(),
        options: Some(vec![("o".into(), Json::str("1"))]),
        labels: Some(vec![
            ("sandguard.session".into(), Json::str("x")),
            ("a".into(), Json::str("b")),
        ]),
    };
    assert_eq!(
        String::from_utf8(v.create_body(&session())).unwrap(),
        r#"{"Name":"n","Labels":{"sandguard.session":"s1","a":"b","sandguard.owner":"o1"},"Driver":"d","DriverOpts":{"o":"1"}}"#
    );
    let plain = Volume {
        name: "n".into(),
        ..Volume::default()
    };
    assert_eq!(
        String::from_utf8(plain.create_body(&BTreeMap::new())).unwrap(),
        r#"{"Name":"n","Labels":{}}"#
    );
}

#[test]
fn claims_only_what_this_session_made() {
    let c = |kind, answer: &str| claimable(kind, answer.as_bytes(), "s1");
    let id = |id: &str| Some((id.to_string(), None));
    assert_eq!(
        c(Create::Container, r#"{"Id":"abc","Warnings":[]}"#),
        id("abc")
    );
    assert_eq!(c(Create::Network, r#"{"Id":"n1","Warning":""}"#), id("n1"));
    let mine = r#"{"Name":"v1","Labels":{"sandguard.session":"s1"}}"#;
    assert_eq!(c(Create::Volume, mine), id("v1"));
    // A volume is pinned to its creation time.
    let dated =
        r#"{"CreatedAt":"2026-12-04T16:49:25Z","Name":"v1","Labels":{"sandguard.session":"s1"}}"#;
    assert_eq!(
        c(Create::Volume, dated),
        Some(("v1".to_string(), Some("1796402965".to_string())))
    );
    for other in [
        r#"{"Name":"v1","Labels":{"sandguard.session":"s2"}}"#,
        r#"{"Name":"v1","Labels":{"a":"b"}}"#,
        r#"{"Name":"v1","Labels":null}"#,
        r#"{"Name":"v1"}"#,
        r#"{"Name":"","Labels":{"sandguard.session":"s1"}}"#,
    ] {
        assert_eq!(c(Create::Volume, other), None, "{other}");
    }
    assert_eq!(
        c(Create::Container, r#"{"Id":"a","Labels":{"x":"y"}}"#),
        None
    );
    assert_eq!(c(Create::Network, "{}"), None);
}

#[test]
fn a_create_asking_to_be_detached_is_held_as_a_detach() {
    let hold = |body: &str| stamp(body.as_bytes(), &session()).unwrap().1;
    for detached in [
        r#"{"Labels":{"sandguard.detached":"true"}}"#,
        r#"{"labels":{"sandguard.detached":"true"}}"#,
        r#"{"Labels":{"sandguard.detached":"false"},"LABELS":{"sandguard.detached":"true"}}"#,
    ] {
        assert_eq!(hold(detached), Hold::Detach, "{detached}");
    }
    for claimed in [
        "",
        r#"{"Labels":{"a":"b"}}"#,
        r#"{"Labels":{"sandguard.detached":"true"},"labels":null}"#,
        r#"{"Labels":{"sandguard.detached":"yes"}}"#,
        r#"{"Labels":{"Sandguard.Detached":"true"}}"#,
    ] {
        assert_eq!(hold(claimed), Hold::Claim, "{claimed}");
    }
    let plain = Volume::default();
    assert_eq!(plain.hold(Hold::Detach), Hold::Detach);
    assert_eq!(plain.hold(Hold::Claim), Hold::Claim);
    let own = Volume {
        labels: Some(vec![("sandguard.detached".into(), Json::str("true"))]),
        ..Volume::default()
    };
    assert_eq!(own.hold(Hold::Claim), Hold::Detach);
}
