//! Reliability, repeated: the kill matrix twenty times over with an unrelated session that must
//! survive every run, and the ledger under a thousand random sidecar kills.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::wrapper::{guarded, unsafe_kill, wait_for_file};

const ROUNDS: usize = 20;

/// One labelled container and one merely claimed, then `end`.
fn small_script(ids: &std::path::Path, end: &str) -> String {
    format!(
        "ulimit -c 0\n\
         L=$(echo \"$SANDGUARD_LABELS\" | sed 's/^/--label /; s/,/ --label /g')\n\
         docker run -d --network none $L {IMAGE} sleep 600 > {ids}.tmp\n\
         c=$(docker run -d --network none {IMAGE} sleep 600); echo \"$c\" >> {ids}.tmp\n\
         sandguard claim docker \"$c\"\n\
         mv {ids}.tmp {ids}\n\
         {end}\n",
        ids = ids.display()
    )
}

#[derive(Clone, Copy, Debug)]
enum Death {
    Kill,
    Term,
    GroupInt,
    Segv,
    Exit,
    ExecThenExit,
}

fn one_run(s: &Scratch, death: Death, round: usize) {
    let ids = s.path().join(format!("ids-{death:?}-{round}"));
    let end = match death {
        Death::Exit => "exit 0",
        Death::ExecThenExit => "exec sh -c 'sleep 0.2; exit 0'",
        _ => "sleep 600",
    };
    let mut owner = guarded(s, &small_script(&ids, end));
    let containers = wait_for_file(&ids, &mut owner);
    let pid = owner.id() as i32;
    match death {
        Death::Kill => unsafe_kill(pid, libc::SIGKILL),
        Death::Term => unsafe_kill(pid, libc::SIGTERM),
        Death::GroupInt => unsafe_kill(-pid, libc::SIGINT),
        Death::Segv => unsafe_kill(pid, libc::SIGSEGV),
        Death::Exit | Death::ExecThenExit => {}
    }
    let _ = owner.wait();
    eventually(
        Duration::from_secs(5),
        &format!("{death:?} round {round}: both containers reclaimed"),
        || containers.iter().all(|c| !container_exists(c)),
    );
}

#[test]
fn the_kill_matrix_twenty_times_with_a_bystander_that_survives() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("matrix");
    let bystander_ids = s.path().join("bystander");
    let mut bystander = guarded(&s, &small_script(&bystander_ids, "sleep 3600"));
    let bystander_containers = wait_for_file(&bystander_ids, &mut bystander);
    let deaths = [
        Death::Kill,
        Death::Term,
        Death::GroupInt,
        Death::Segv,
        Death::Exit,
        Death::ExecThenExit,
    ];
    let started = Instant::now();
    // Three runs at a time, every death twenty times.
    let work: Vec<(Death, usize)> = (0..ROUNDS)
        .flat_map(|r| deaths.iter().map(move |d| (*d, r)))
        .collect();
    std::thread::scope(|scope| {
        for chunk in work.chunks(work.len().div_ceil(3)) {
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
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut total_journaled = 0;
    for round in 0..1000 {
        let session = format!("k{round}x{}", &unique()[..6]);
        let (read_end, write_end) = sandguard::unix::pipe().unwrap();
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
            sandguard::unix::spawn_in_new_session(&mut cmd, read_end.as_raw_fd(), 3).unwrap();
        drop(cmd);
        drop(read_end);
        let mut ready = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), format!("ready {session}"));
        // Stream claims, and kill the sidecar after a random 0-20 ms.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let kill_after = Duration::from_micros(seed % 20_000);
        let mut pipe = std::fs::File::from(write_end);
        let start = Instant::now();
        let mut sent = 0;
        while start.elapsed() < kill_after {
            if sent < 500
                && pipe
                    .write_all(format!("claim docker {sent:012x}\n").as_bytes())
                    .is_ok()
            {
                sent += 1;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let view = sandguard::ledger::StateDir::open(&state)
            .unwrap()
            .read_session(&session)
            .unwrap();
        assert_eq!(
            view.corrupt_lines, 0,
            "round {round}: the journal reads back whole"
        );
        let n = view.claims.len();
        assert!(
            n <= sent,
            "round {round}: {n} claims journaled, {sent} sent"
        );
        // Lines are applied in order: what is journaled is exactly the first n sent.
        for k in 0..n {
            assert!(
                view.claims.iter().any(|t| t.id == format!("{k:012x}")),
                "round {round}: claim {k:012x} lost while {:012x} kept",
                n - 1
            );
        }
        total_journaled += n;
    }
    eprintln!("ledger: 1000 kills, {total_journaled} claims journaled and read back");
    assert!(
        total_journaled > 0,
        "some claims were journaled before the kills"
    );
}
