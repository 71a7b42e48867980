//! Reliability, repeated: the kill matrix twenty times over with an unrelated session that must
//! survive every run, and the ledger under a thousand random sidecar kills.
//!
//! The kill matrix holds [`exclusive`] for its whole run: its own Docker load (two runs at a
//! time, each starting and removing containers) would otherwise starve the deadlines of the
//! other Docker tests of this binary, and theirs its own.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::watch::wrapper::{guarded, unsafe_kill, wait_for_file};

const ROUNDS: usize = 20;
/// Kill-matrix runs at a time.
const PARALLEL: usize = 2;

/// One labelled container and one merely claimed, then `end`. `set -e`: a `docker run` or a
/// claim that fails ends the script before it writes its ids.
fn small_script(ids: &std::path::Path, end: &str) -> String {
    format!(
        "set -e\n\
         ulimit -c 0\n\
         L=$(echo \"$SANDGUARD_LABELS\" | sed 's/^/--label /; s/,/ --label /g')\n\
         docker run -d --network none $L {IMAGE} sleep 600 > {ids}.tmp\n\
         c=$(docker run -d --network none {IMAGE} sleep 600); echo \"$c\" >> {ids}.tmp\n\
         sandguard claim docker \"$c\"\n\
         mv {ids}.tmp {ids}\n\
         {end}\n",
        ids = ids.display()
    )
}

/// What the owner execs into: a program that claims a third container of its own, says so
/// (its id, then the session) and sleeps. The exec itself is no death.
pub(crate) fn exec_into(done: &std::path::Path) -> String {
    format!(
        "exec sh -ec 'c=$(docker run -d --network none {IMAGE} sleep 600)\n\
         sandguard claim docker \"$c\"\n\
         printf \"%s\\n%s\\n\" \"$c\" \"$SANDGUARD_SESSION\" > {done}.tmp; mv {done}.tmp {done}\n\
         exec sleep 600'",
        done = done.display()
    )
}

/// After the owner's exec (see [`exec_into`]): waits until the exec'd program has claimed its
/// container, checks that the session is still active and watched and that `containers` and
/// the new one still run, and returns the new one's id.
pub(crate) fn survive_exec(
    s: &Scratch,
    what: &str,
    done: &std::path::Path,
    owner: &mut std::process::Child,
    containers: &[String],
) -> String {
    let got = wait_for_file(done, owner);
    let (third, session) = (got[0].clone(), got[1].clone());
    assert!(is_container_id(&third), "{what}: {got:?}");
    let v = json(&run(sandguard(s).args(["sessions", "--json"])).stdout);
    let this = v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["session"] == session.as_str())
        .unwrap_or_else(|| panic!("{what}: no session {session}: {v}"))
        .clone();
    assert_eq!(
        (&this["state"], &this["sidecar_alive"]),
        (&serde_json::json!("active"), &serde_json::json!(true)),
        "{what}: an exec is not a death: {this}"
    );
    assert!(
        containers
            .iter()
            .chain([&third])
            .all(|c| container_exists(c)),
        "{what}: the containers survive the exec"
    );
    third
}

#[derive(Clone, Copy, Debug)]
enum Death {
    Kill,
    Term,
    GroupInt,
    GroupHup,
    Segv,
    Exit,
    /// The owner execs another program (which must not count as a death), then that
    /// program is SIGKILLed.
    ExecThenKill,
}

const DEATHS: [Death; 7] = [
    Death::Kill,
    Death::Term,
    Death::GroupInt,
    Death::GroupHup,
    Death::Segv,
    Death::Exit,
    Death::ExecThenKill,
];

/// A container id as `docker run -d` prints it.
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Containers of a run that failed half way: removed when the test panics, since a claimed
/// one carries no label that a later sweep could find.
struct Leftovers(Vec<String>);

impl Drop for Leftovers {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = std::process::Command::new("docker")
                .args(["rm", "-f"])
                .args(&self.0)
                .output();
        }
    }
}

fn one_run(s: &Scratch, death: Death, round: usize) {
    let what = format!("{death:?} round {round}");
    let ids = s.path().join(format!("ids-{death:?}-{round}"));
    let exec_done = s.path().join(format!("exec-{death:?}-{round}"));
    let end = match death {
        Death::Exit => "exit 0".to_string(),
        Death::ExecThenKill => exec_into(&exec_done),
        _ => "sleep 600".to_string(),
    };
    let mut owner = guarded(s, &small_script(&ids, &end));
    let mut containers = wait_for_file(&ids, &mut owner);
    let mut leftovers = Leftovers(containers.clone());
    assert!(
        containers.len() == 2 && containers.iter().all(|c| is_container_id(c)),
        "{what}: two container ids before the death: {containers:?}"
    );
    if !matches!(death, Death::Exit) {
        // (A script that exits at once may already have been reclaimed by now.)
        assert!(
            containers.iter().all(|c| container_exists(c)),
            "{what}: both containers run before the death"
        );
    }
    if let Death::ExecThenKill = death {
        let third = survive_exec(s, &what, &exec_done, &mut owner, &containers);
        leftovers.0.push(third.clone());
        containers.push(third);
    }
    let pid = owner.id() as i32;
    match death {
        Death::Kill | Death::ExecThenKill => unsafe_kill(pid, libc::SIGKILL),
        Death::Term => unsafe_kill(pid, libc::SIGTERM),
        Death::GroupInt => unsafe_kill(-pid, libc::SIGINT),
        Death::GroupHup => unsafe_kill(-pid, libc::SIGHUP),
        Death::Segv => unsafe_kill(pid, libc::SIGSEGV),
        Death::Exit => {}
    }
    let _ = owner.wait();
    eventually(
        Duration::from_secs(5),
        &format!("{what}: every container reclaimed"),
        || containers.iter().all(|c| !container_exists(c)),
    );
}

#[test]
fn the_kill_matrix_twenty_times_with_a_bystander_that_survives() {
    require_docker();
    let _g = exclusive();
    let s = Scratch::new("matrix");
    let bystander_ids = s.path().join("bystander");
    let mut bystander = guarded(&s, &small_script(&bystander_ids, "sleep 3600"));
    let bystander_containers = wait_for_file(&bystander_ids, &mut bystander);
    assert!(
        bystander_containers.len() == 2 && bystander_containers.iter().all(|c| container_exists(c)),
        "{bystander_containers:?}"
    );
    let started = Instant::now();
    // Every death twenty times, PARALLEL runs at a time.
    let work: Vec<(Death, usize)> = (0..ROUNDS)
        .flat_map(|r| DEATHS.iter().map(move |d| (*d, r)))
        .collect();
    std::thread::scope(|scope| {
        for chunk in work.chunks(work.len().div_ceil(PARALLEL)) {
            let s = &s;
            scope.spawn(move || {
                for (death, round) in chunk {
                    one_run(s, *death, *round);
                }
            });
        }
    });
    eprintln!(
        "kill matrix: {} runs in {:?}",
        work.len(),
        started.elapsed()
    );
    assert!(
        bystander_containers.iter().all(|c| container_exists(c)),
        "the unrelated session's containers survived every run"
    );
    unsafe_kill(bystander.id() as i32, libc::SIGKILL);
    let _ = bystander.wait();
    eventually(
        Duration::from_secs(5),
        "the bystander is reclaimed at its own death",
        || bystander_containers.iter().all(|c| !container_exists(c)),
    );
}

/// The `k`th container id claimed in round `round`: each round claims ids of its own, since
/// a claim of what an earlier round's session (whose owner, this process, lives) claimed is
/// refused as a steal.
fn id(round: usize, k: usize) -> String {
    format!("{round:04x}{k:08x}")
}

#[test]
fn the_journal_survives_a_thousand_random_sidecar_kills() {
    let s = Scratch::new("ledger-kills");
    let config = s.path().join("quiet.toml");
    // Docker configured (the claims must be ones it would accept: container ids), but never
    // reached: the sidecar is killed long before it would reclaim anything.
    std::fs::write(
        &config,
        "[providers.docker]\nenabled = true\nhost = \"unix:///nonexistent.sock\"\n",
    )
    .unwrap();
    let me = std::process::id().to_string();
    let state = s.path().join("state/sandguard");
    let mut rng = sandguard::testing::rng::Rng::new(0x2545_F491_4F6C_DD1D);
    let mut total_journaled = 0;
    let mut torn_lines = 0;
    for round in 0..1000 {
        let session = format!("k{round}x{}", &unique()[..6]);
        let (read_end, write_end) = sandguard::testing::unix::pipe().unwrap();
        let mut cmd = sandguard(&s);
        cmd.env("SANDGUARD_CONFIG", &config)
            .args([
                "watch",
                "--owner-pid",
                &me,
                "--session",
                &session,
                "--control-fd",
                "3",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child =
            sandguard::testing::unix::spawn_in_new_session(&mut cmd, read_end.as_raw_fd(), 3)
                .unwrap();
        drop(cmd);
        drop(read_end);
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), format!("ready {session}"));
        // Stream claims, and kill the sidecar after a random 0-20 ms.
        let kill_after = Duration::from_micros(rng.next() % 20_000);
        let mut pipe = std::fs::File::from(write_end);
        let start = Instant::now();
        let mut sent = 0;
        while start.elapsed() < kill_after {
            if sent < 500
                && pipe
                    .write_all(format!("claim docker {}\n", id(round, sent)).as_bytes())
                    .is_ok()
            {
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let view = sandguard::testing::ledger::StateDir::open(&state)
            .unwrap()
            .read_session(&session)
            .unwrap();
        assert_eq!(
            view.corrupt_lines, 0,
            "round {round}: the journal reads back whole"
        );
        // The claims are in the journal in the order they were sent: exactly the first n.
        // Its last line may be torn, but only as the kernel tears it: a SIGKILL that lands
        // while one `write` is copying a line across a page boundary cuts it short there.
        // That record was never synced, so never acknowledged, and the reader drops it. What
        // may be torn is the next claim in order, a byte prefix of its line, nothing else.
        let raw = std::fs::read(state.join(format!("sessions/{session}.journal"))).unwrap();
        let whole = raw.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let (raw, torn) = raw.split_at(whole);
        let claimed: Vec<String> = raw
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<serde_json::Value>(l).unwrap())
            .filter(|v| v["ev"] == "claim")
            .map(|v| v["id"].as_str().unwrap().to_string())
            .collect();
        let n = claimed.len();
        assert!(
            n <= sent,
            "round {round}: {n} claims journaled, {sent} sent"
        );
        let first_n: Vec<String> = (0..n).map(|k| id(round, k)).collect();
        assert_eq!(
            claimed, first_n,
            "round {round}: the journal holds the first {n} claims sent, in order"
        );
        // The pattern a torn line is held to matches every whole claim line.
        for line in raw
            .split(|&b| b == b'\n')
            .filter(|l| l.windows(7).any(|w| w == b"\"claim\""))
        {
            let id = serde_json::from_slice::<serde_json::Value>(line).unwrap()["id"].clone();
            assert!(
                is_torn_claim(line, id.as_str().unwrap()),
                "round {round}: {line:?}"
            );
        }
        if !torn.is_empty() {
            torn_lines += 1;
            assert!(
                n < sent && is_torn_claim(torn, &id(round, n)),
                "round {round}: the torn last line is not the next claim cut short: {:?}",
                String::from_utf8_lossy(torn)
            );
        }
        assert_eq!(
            view.claims.len(),
            n,
            "round {round}: the reader sees them all"
        );
        total_journaled += n;
    }
    eprintln!(
        "ledger: 1000 kills, {total_journaled} claims journaled and read back, \
         {torn_lines} torn last lines dropped"
    );
    assert!(
        total_journaled > 0,
        "some claims were journaled before the kills"
    );
}

/// Whether `torn` is a byte prefix, cut short, of the journal line claiming Docker `id`:
/// `{"t":MILLIS,"ev":"claim","provider":"docker","id":"ID"}` with its `\n` missing.
fn is_torn_claim(torn: &[u8], id: &str) -> bool {
    let head = b"{\"t\":";
    if torn.len() <= head.len() {
        return head.starts_with(torn);
    }
    let Some(rest) = torn.strip_prefix(head) else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let tail = format!(",\"ev\":\"claim\",\"provider\":\"docker\",\"id\":\"{id}\"}}");
    digits > 0 && tail.as_bytes().starts_with(&rest[digits..])
}
