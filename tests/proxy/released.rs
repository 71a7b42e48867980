//! What the provider removes by itself is released when it is seen gone: a container the
//! daemon removes once it exits (`docker run --rm`, the commonest agent pattern) gives its slot
//! back and stops counting toward the session's spend, from Docker's own `destroy` event, while
//! the owner lives. Before 2026-12-07 only a removal through the proxy released anything: the
//! second `docker run --rm` under `--max-sandboxes 1` was refused with nothing of the session
//! left ("this session sandboxes: 1"), and its time kept counting.

use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file};

#[test]
fn a_container_the_daemon_removed_by_itself_gives_its_slot_back_and_stops_counting() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("autoremove");
    let out = s.path();
    let script = format!(
        r#"docker run --rm --network none {IMAGE} true > /dev/null 2> {out}/err1; rc1=$?
docker run --rm --network none {IMAGE} true > /dev/null 2> {out}/err2; rc2=$?
printf '%s\n' "$SANDGUARD_SESSION" "$rc1" "$rc2" > {out}/done.tmp
mv {out}/done.tmp {out}/done
exec sleep 3600
"#,
        out = out.display(),
    );
    let args = ["run", "--docker-proxy", "--max-sandboxes", "1"];
    let mut job = guarded_with(&s, &args, &script);
    let lines = wait_for_file(&out.join("done"), &mut job.0);
    let [session, rc1, rc2] = <[String; 3]>::try_from(lines).unwrap();
    let err = |n| std::fs::read_to_string(out.join(format!("err{n}"))).unwrap_or_default();
    assert_eq!(rc1, "0", "the first run: {}", err(1));
    assert_eq!(
        rc2,
        "0",
        "the second run, its first container gone by itself: {}",
        err(2)
    );
    let show = || {
        let out = run(sandguard(&s).args(["sessions", "show", &session, "--json"]));
        assert_eq!(out.code, 0, "{}", out.stderr);
        json(&out.stdout)
    };
    // Both are gone, and seen so while the owner lives: none counts as alive, and their
    // time ended when the daemon removed them (each ran `true`: well under a second).
    eventually(
        Duration::from_secs(10),
        "both are seen gone while the owner lives",
        || show()["spend"]["alive"] == 0,
    );
    let shown = show();
    let sandboxes = shown["sandboxes"].as_array().unwrap();
    assert_eq!(sandboxes.len(), 2, "{shown}");
    for sandbox in sandboxes {
        assert_eq!(sandbox["fate"], "vanished", "{sandbox}");
        let seconds = sandbox["seconds"].as_f64().unwrap();
        assert!(seconds < 5.0, "counted {seconds} s: {sandbox}");
    }
    unsafe_kill(-(job.0.id() as i32), libc::SIGKILL);
    let _ = job.0.wait();
}
