//! The Daytona driver through the real binary, against the Daytona emulator: `ps`, `stop`,
//! reclaim on owner death, paging (and the legacy bare array), 429 storms with named
//! throttler headers, 5xx, latency, dropped connections, an outage longer than the deadline, a
//! delete refused with 409 while a start lands, and the autostop/autodelete renewal.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandguard::labels::{OWNER, SESSION};

use crate::support::daytona::Daytona;
use crate::support::emu::Faults;
use crate::support::*;

const KEY: &str = "dtn_0123456789abcdef0123456789abcdef";
const QUICK: &str =
    "deadline = \"3s\"\nretry_initial = \"50ms\"\nretry_max = \"1s\"\nsettle = \"0\"\n";

struct Setup {
    s: Scratch,
    emu: Daytona,
    config: PathBuf,
}

/// An emulator and a config that switches Docker off and sets `reclaim` (the lines of the
/// `[reclaim]` table).
fn setup(tag: &str, reclaim: &str) -> Setup {
    let s = Scratch::new(tag);
    let config = s.path().join("sandguard.toml");
    std::fs::write(
        &config,
        format!("[providers.docker]\nenabled = false\n\n[reclaim]\n{reclaim}"),
    )
    .unwrap();
    Setup {
        emu: Daytona::start(KEY),
        s,
        config,
    }
}

impl Setup {
    fn cmd(&self) -> Command {
        let mut cmd = sandguard(&self.s);
        cmd.env("DAYTONA_API_KEY", KEY)
            .env("DAYTONA_API_URL", self.emu.api_url())
            .env_remove("DAYTONA_SERVER_URL")
            .env("SANDGUARD_CONFIG", &self.config);
        cmd
    }

    fn run(&self, args: &[&str]) -> Run {
        run(self.cmd().args(args))
    }

    /// The instance ids `ps --json --provider daytona` lists.
    fn listed(&self) -> Vec<String> {
        let out = self.run(&["ps", "--json", "--provider", "daytona"]);
        assert_eq!(out.code, 0, "{}", out.stderr);
        let v = json(&out.stdout);
        let mut ids: Vec<String> = v["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["instance_id"].as_str().unwrap().to_string())
            .collect();
        ids.sort();
        ids
    }
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

/// Polls until `check` holds, for at most `limit`.
fn eventually(limit: Duration, what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn ps_lists_labelled_sandboxes_with_their_session_and_only_those() {
    let t = setup("dt-ps", QUICK);
    let session = format!("dps{}", unique());
    let a = t
        .emu
        .insert(&[(SESSION, &session), (OWNER, &live_owner_label())]);
    let b = t.emu.insert(&[(SESSION, &session), ("app", "x")]);
    let stranger = t.emu.insert(&[("app", "x")]);
    let lookalike = t.emu.insert(&[("sandguard.sessionx", &session)]);

    let out = t.run(&["ps", "--provider", "daytona"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = |id: &str| out.stdout.lines().find(|l| l.starts_with(id));
    let a_line = line(&a).expect("a labelled sandbox is listed");
    assert!(
        a_line.contains("daytona")
            && a_line.contains("started")
            && a_line.contains("daytonaio/sandbox:0.4.3")
            && a_line.contains(&session)
            && a_line.contains("alive"),
        "{a_line}"
    );
    assert!(line(&b).is_some(), "{}", out.stdout);
    assert!(line(&stranger).is_none() && line(&lookalike).is_none());

    let out = t.run(&["ps", "--json", "--provider", "daytona"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v = json(&out.stdout);
    assert_eq!(v["errors"], serde_json::json!([]));
    let all = v["sandboxes"].as_array().unwrap();
    assert_eq!(all.len(), 2, "{v}");
    let sb = all.iter().find(|s| s["instance_id"] == b.as_str()).unwrap();
    assert_eq!(sb["provider"], "daytona");
    assert_eq!(sb["kind"], "instance");
    assert_eq!(sb["status"], "started");
    assert_eq!(sb["session"], session.as_str());
    assert_eq!(sb["labels"]["app"], "x");
    assert!(sb["created_at"].as_str().unwrap().starts_with("2026-"));

    // `ps` only lists.
    let hits = t.emu.hits();
    assert!(hits.iter().all(|h| h.path == "/api/sandbox"), "{hits:?}");
}

#[test]
fn a_wrong_key_is_an_error_and_no_key_is_ever_printed() {
    let t = setup("dt-auth", QUICK);
    t.emu.insert(&[(SESSION, "s")]);
    let wrong = "dtn_wrongwrongwrongwrongwrongwrong";
    for json_flag in [false, true] {
        let mut cmd = t.cmd();
        cmd.env("DAYTONA_API_KEY", wrong)
            .args(["ps", "--provider", "daytona"]);
        if json_flag {
            cmd.arg("--json");
        }
        let out = run(&mut cmd);
        assert_eq!(out.code, 1, "{} {}", out.stdout, out.stderr);
        for text in [&out.stdout, &out.stderr] {
            assert!(!text.contains(wrong) && !text.contains(KEY), "{text}");
        }
        if json_flag {
            let v = json(&out.stdout);
            let errors = v["errors"].as_array().unwrap();
            assert_eq!(errors.len(), 1, "{v}");
            assert_eq!(errors[0]["provider"], "daytona");
            assert!(
                errors[0]["error"].as_str().unwrap().contains("HTTP 401"),
                "{v}"
            );
        } else {
            assert!(
                out.stdout.contains("could not query daytona"),
                "{}",
                out.stdout
            );
        }
    }
}

#[test]
fn providers_reports_daytona_reachable() {
    let t = setup("dt-prov", QUICK);
    let out = t.run(&["providers", "--json"]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    let v = json(&out.stdout);
    let d = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "daytona")
        .unwrap()
        .clone();
    assert_eq!(d["configured"], true);
    assert_eq!(d["reachable"], true);
    assert_eq!(
        d["detail"],
        format!("daytona API at {}", t.emu.api_url()).as_str()
    );
    assert_eq!(d["capabilities"]["ttl"], true);
}

#[test]
fn stop_removes_exactly_its_targets() {
    let t = setup("dt-stop", QUICK);
    let (s1, s2) = (format!("a{}", unique()), format!("b{}", unique()));
    let one = t.emu.insert(&[(SESSION, &s1)]);
    let s1_rest = [
        t.emu.insert(&[(SESSION, &s1)]),
        t.emu.insert(&[(SESSION, &s1)]),
    ];
    let s2_all = [
        t.emu.insert(&[(SESSION, &s2)]),
        t.emu.insert(&[(SESSION, &s2)]),
    ];
    let stranger = t.emu.insert(&[("app", "x")]);

    let out = t.run(&["stop", &one]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(!t.emu.is_live(&one));
    assert_eq!(t.emu.live().len(), 5);

    let out = t.run(&["stop", "--all", "--session", &s1]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(s1_rest.iter().all(|id| !t.emu.is_live(id)));
    let mut expected: Vec<String> = s2_all.to_vec();
    expected.push(stranger.clone());
    assert_eq!(t.emu.live(), sorted(expected));

    // What was deleted is `destroying` for a moment, then gone: a second stop finds no id.
    eventually(Duration::from_secs(3), "the deletion completes", || {
        t.run(&["stop", &one]).code == 1
    });

    let out = t.run(&["stop", "--all", "--provider", "daytona"]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(t.emu.live(), vec![stranger]);
}

#[test]
fn a_delete_refused_while_a_start_lands_is_retried() {
    let t = setup("dt-busy", QUICK);
    let session = format!("busy{}", unique());
    let busy = t
        .emu
        .insert_busy(&[(SESSION, &session)], Duration::from_millis(600));
    let out = t.run(&["stop", "--json", &busy]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(!t.emu.is_live(&busy));
    let conflicts = t.emu.hits().iter().filter(|h| h.status == 409).count();
    assert!(
        conflicts >= 1,
        "the emulator should have answered 409 first"
    );
}

/// `sandguard -- sh -c …` in its own process group, killed with its group on drop.
struct Job(Child);

impl Drop for Job {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.wait();
    }
}

/// Starts a guarded owner that writes its session and labels to a file, then sleeps; returns
/// the job, the session, and the labels as the program would put them on its sandboxes.
fn guarded_owner(t: &Setup) -> (Job, String, Vec<(String, String)>) {
    use std::os::unix::process::CommandExt;
    let file = t.s.path().join("session");
    let script = format!(
        "echo \"$SANDGUARD_SESSION $SANDGUARD_LABELS\" > {f}.tmp && mv {f}.tmp {f}; exec sleep 600",
        f = file.display()
    );
    let child = t
        .cmd()
        .args(["--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn sandguard");
    let mut job = Job(child);
    let deadline = Instant::now() + Duration::from_secs(15);
    let text = loop {
        if let Ok(text) = std::fs::read_to_string(&file) {
            break text;
        }
        if let Ok(Some(status)) = job.0.try_wait() {
            panic!("the guarded owner ended early ({status})");
        }
        assert!(Instant::now() < deadline, "the owner never started");
        std::thread::sleep(Duration::from_millis(25));
    };
    let (session, labels) = text.trim().split_once(' ').expect("session and labels");
    let labels = labels
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (job, session.to_string(), labels)
}

fn insert_as_owner(emu: &Daytona, labels: &[(String, String)], n: usize) -> Vec<String> {
    let pairs: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    (0..n).map(|_| emu.insert(&pairs)).collect()
}

/// SIGKILL to the owner (the wrapper) alone, as in `tests/wrapper.rs`.
fn kill_owner(job: &mut Job) {
    let status = Command::new("kill")
        .args(["-KILL", "--", &job.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    job.0.wait().unwrap();
}

#[test]
fn the_death_of_the_owner_reclaims_its_sandboxes_within_5s() {
    let t = setup("dt-kill", QUICK);
    let (mut job, session, labels) = guarded_owner(&t);
    assert!(labels.iter().any(|(k, v)| k == SESSION && *v == session));
    assert!(labels.iter().any(|(k, _)| k == OWNER));
    let mine = insert_as_owner(&t.emu, &labels, 3);
    let other = t.emu.insert(&[(SESSION, &format!("other{}", unique()))]);
    let stranger = t.emu.insert(&[("app", "x")]);
    assert_eq!(t.emu.live().len(), 5);

    kill_owner(&mut job);
    eventually(
        Duration::from_secs(5),
        "the dead owner's three sandboxes are deleted",
        || mine.iter().all(|id| !t.emu.is_live(id)),
    );
    assert_eq!(t.emu.live(), sorted(vec![other, stranger]));
}

#[test]
fn listing_walks_every_page() {
    let t = setup("dt-pages", QUICK);
    let session = format!("pg{}", unique());
    let mine: Vec<String> = (0..450)
        .map(|_| t.emu.insert(&[(SESSION, &session)]))
        .collect();
    let strangers = [t.emu.insert(&[]), t.emu.insert(&[("app", "x")])];

    assert_eq!(t.listed(), sorted(mine.clone()));
    let pages: Vec<_> = t
        .emu
        .hits()
        .into_iter()
        .filter(|h| h.method == "GET" && h.path == "/api/sandbox")
        .collect();
    assert_eq!(pages.len(), 3, "450 sandboxes at 200 a page: {pages:?}");

    let out = t.run(&["stop", "--all", "--session", &session]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(t.emu.live(), sorted(strangers.to_vec()));
}

#[test]
fn the_legacy_bare_array_is_understood() {
    let t = setup("dt-legacy", QUICK);
    t.emu.set_legacy(true);
    let session = format!("lg{}", unique());
    let mine: Vec<String> = (0..250)
        .map(|_| t.emu.insert(&[(SESSION, &session)]))
        .collect();
    let stranger = t.emu.insert(&[("app", "x")]);
    assert_eq!(t.listed(), sorted(mine));
    let out = t.run(&[
        "stop",
        "--all",
        "--provider",
        "daytona",
        "--session",
        &session,
    ]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(t.emu.live(), vec![stranger]);
}

/// Three of the session's, one of another session, one unlabelled; returns (mine, survivors).
fn populate(emu: &Daytona, session: &str) -> (Vec<String>, Vec<String>) {
    let mine = (0..3).map(|_| emu.insert(&[(SESSION, session)])).collect();
    let survivors = vec![
        emu.insert(&[(SESSION, &format!("other{}", unique()))]),
        emu.insert(&[("app", "x")]),
    ];
    (mine, sorted(survivors))
}

#[test]
fn a_429_storm_is_waited_out_without_an_early_request() {
    // At the default concurrency: requests merely in flight when a 429 was sent do not count
    // as early (see `emu::IN_FLIGHT`).
    let t = setup(
        "dt-429",
        "deadline = \"15s\"\nretry_initial = \"50ms\"\nretry_max = \"1s\"\nsettle = \"0\"\n",
    );
    let session = format!("tr{}", unique());
    let (_, survivors) = populate(&t.emu, &session);
    t.emu.set_faults(Faults {
        throttle_rate: 0.5,
        retry_after_secs: 1,
        ..Faults::default()
    });
    let out = t.run(&[
        "stop",
        "--all",
        "--provider",
        "daytona",
        "--session",
        &session,
    ]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(t.emu.live(), survivors);
    let hits = t.emu.hits();
    assert!(hits.iter().any(|h| h.status == 429), "no 429 was injected");
    assert_eq!(t.emu.early_hits(), 0, "{hits:?}");
}

#[test]
fn thirty_percent_5xx_still_removes_everything() {
    let t = setup(
        "dt-5xx",
        "deadline = \"15s\"\nretry_initial = \"50ms\"\nretry_max = \"500ms\"\nsettle = \"0\"\n",
    );
    let session = format!("fx{}", unique());
    let (_, survivors) = populate(&t.emu, &session);
    // More than three, so that the seeded draws surely fail some of them.
    for _ in 0..9 {
        t.emu.insert(&[(SESSION, &session)]);
    }
    t.emu.set_faults(Faults {
        error_rate: 0.3,
        ..Faults::default()
    });
    let out = t.run(&[
        "stop",
        "--all",
        "--provider",
        "daytona",
        "--session",
        &session,
    ]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(t.emu.live(), survivors);
    assert!(t.emu.hits().iter().any(|h| h.status == 503));
}

/// A fault that slows or breaks requests without refusing them: `stop` still removes every
/// sandbox of the session, and nothing else.
fn stop_under(tag: &str, faults: Faults) -> Daytona {
    let t = setup(
        tag,
        "deadline = \"15s\"\nretry_initial = \"50ms\"\nretry_max = \"500ms\"\nsettle = \"0\"\n",
    );
    let session = format!("f{}", unique());
    let (_, survivors) = populate(&t.emu, &session);
    for _ in 0..7 {
        t.emu.insert(&[(SESSION, &session)]);
    }
    t.emu.set_faults(faults);
    let out = t.run(&[
        "stop",
        "--all",
        "--provider",
        "daytona",
        "--session",
        &session,
    ]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(t.emu.live(), survivors);
    t.emu
}

#[test]
fn a_slow_provider_is_waited_for_not_given_up_on() {
    stop_under(
        "dt-slow",
        Faults {
            latency: Duration::from_millis(150),
            ..Faults::default()
        },
    );
}

#[test]
fn dropped_connections_are_retried_until_everything_is_removed() {
    let emu = stop_under(
        "dt-drop",
        Faults {
            drop_rate: 0.25,
            ..Faults::default()
        },
    );
    assert!(
        emu.hits().iter().any(|h| h.status == 0),
        "no connection was dropped"
    );
}

#[test]
fn an_outage_past_the_deadline_leaves_the_session_pending_for_stop() {
    let t = setup("dt-outage", QUICK);
    let (mut job, session, labels) = guarded_owner(&t);
    let mine = insert_as_owner(&t.emu, &labels, 3);
    populate(&t.emu, &format!("x{}", unique()));
    let survivors: Vec<String> = t
        .emu
        .live()
        .into_iter()
        .filter(|id| !mine.contains(id))
        .collect();
    t.emu.set_faults(Faults {
        outage: true,
        ..Faults::default()
    });
    kill_owner(&mut job);

    let state = || {
        let out = t.run(&["sessions", "--json"]);
        let v = json(&out.stdout);
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["session"] == session.as_str())
            .map(|s| s["state"].as_str().unwrap_or_default().to_string())
    };
    eventually(
        Duration::from_secs(15),
        "the session is pending after the outage outlasted the deadline",
        || state().as_deref() == Some("pending"),
    );
    assert_eq!(t.emu.live().len(), mine.len() + survivors.len());

    t.emu.set_faults(Faults::default());
    let out = t.run(&[
        "stop",
        "--all",
        "--provider",
        "daytona",
        "--session",
        &session,
    ]);
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert_eq!(t.emu.live(), survivors);
}

#[test]
fn renew_marks_activity_and_sets_an_idle_autostop_with_delete_on_stop() {
    use sandguard::config::Secret;
    use sandguard::labels::Selector;
    use sandguard::providers::daytona::DaytonaProvider;
    use sandguard::providers::{Provider, ProviderError};

    let emu = Daytona::start(KEY);
    let session = format!("rn{}", unique());
    let id = emu.insert(&[(SESSION, &session)]);
    assert_eq!(emu.intervals(&id), Some((15, -1)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let p = DaytonaProvider::new(&Secret::new(KEY), &emu.api_url(), Duration::from_secs(5))
            .unwrap();
        let listed = p.list(&Selector::session(&session)).await.unwrap();
        assert_eq!(listed.len(), 1);
        let sandbox = &listed[0];
        let before = emu.last_activity_ms(&id).unwrap();
        p.renew(sandbox, Duration::from_secs(90)).await.unwrap();
        assert_eq!(emu.intervals(&id), Some((2, 0)));
        assert!(emu.last_activity_ms(&id).unwrap() > before);
        p.remove(sandbox).await.unwrap();
        assert!(matches!(
            p.remove(sandbox).await,
            Err(ProviderError::Transient { .. })
        ));
        eventually(Duration::from_secs(3), "the deletion completes", || {
            emu.intervals(&id).is_none()
        });
        assert!(matches!(
            p.renew(sandbox, Duration::from_secs(60)).await,
            Err(ProviderError::Gone(_))
        ));
        assert!(matches!(
            p.remove(sandbox).await,
            Err(ProviderError::Gone(_))
        ));
    });
    let posts: Vec<String> = emu
        .hits()
        .into_iter()
        .filter(|h| h.method == "POST")
        .map(|h| format!("{} {}", h.status, h.path))
        .collect();
    assert_eq!(
        posts,
        [
            format!("201 /api/sandbox/{id}/last-activity"),
            format!("201 /api/sandbox/{id}/autostop/2"),
            format!("201 /api/sandbox/{id}/autodelete/0"),
            format!("404 /api/sandbox/{id}/last-activity"),
            format!("404 /api/sandbox/{id}/autostop/1"),
        ]
    );
}

/// The emulator itself keeps Daytona's contract: what the driver relies on, and the errors it
/// must never trigger.
#[test]
fn the_emulator_speaks_daytona() {
    let emu = Daytona::start(KEY);
    for _ in 0..3 {
        emu.insert(&[(SESSION, "s")]);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let http = reqwest::Client::new();
        let get = |query: &'static str, key: &'static str| {
            let url = format!("{}/sandbox{query}", emu.api_url());
            let req = http.get(url).bearer_auth(key);
            async move {
                let r = req.send().await.unwrap();
                let status = r.status().as_u16();
                let headers = r.headers().clone();
                (
                    status,
                    headers,
                    r.json::<serde_json::Value>().await.unwrap(),
                )
            }
        };
        let (status, _, body) = get("", "dtn_wrong").await;
        assert_eq!((status, body["statusCode"].as_i64()), (401, Some(401)));
        let (status, _, body) = get("?labels=%7Bnope", KEY).await;
        assert_eq!(status, 400);
        assert_eq!(body["message"], "Invalid labels JSON format");
        assert_eq!(get("?limit=201", KEY).await.0, 400);
        assert_eq!(get("?cursor=zz", KEY).await.0, 400);

        let (status, _, page) = get("?limit=2", KEY).await;
        assert_eq!(status, 200);
        assert_eq!(page["items"].as_array().unwrap().len(), 2);
        let cursor = page["nextCursor"].as_str().unwrap().to_string();
        let url = format!("{}/sandbox", emu.api_url());
        let last: serde_json::Value = http
            .get(&url)
            .bearer_auth(KEY)
            .query(&[("limit", "2"), ("cursor", &cursor)])
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(last["items"].as_array().unwrap().len(), 1);
        assert!(last["nextCursor"].is_null());

        let (status, _, body) = get("/nope", KEY).await;
        assert_eq!(status, 404);
        assert_eq!(body["message"], "Sandbox with ID or name nope not found");

        // A 429 names the throttler of its route, never a plain Retry-After.
        emu.set_faults(Faults {
            throttle_rate: 1.0,
            retry_after_secs: 2,
            ..Faults::default()
        });
        let (status, headers, _) = get("", KEY).await;
        assert_eq!(status, 429);
        assert_eq!(headers["retry-after-authenticated"], "2");
        assert!(headers.get("retry-after").is_none());
        let r = http
            .delete(format!("{url}/x"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 429);
        assert_eq!(r.headers()["retry-after-sandbox-lifecycle"], "2");
    });
}
