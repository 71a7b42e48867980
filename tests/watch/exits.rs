//! Exit codes a user scripts against, and the `/proc` polling fallback.
//!
//! - `sandguard watch` exits 1 when its session ends `pending` (0 when it ends reclaimed).
//! - The wrapper exits 125 on a bad config, and the program never runs.
//! - `release` and `detach` outside a session exit 2, like `claim`.
//! - Where `pidfd_open` fails, the sidecar polls `/proc` and still sees its owner die: the
//!   wrapper runs under a seccomp filter (inherited by the sidecar) that makes `pidfd_open`
//!   return `ENOSYS`, as an old kernel or a container runtime's filter would.

use std::process::Command;

use sandguard::labels::SESSION;

use crate::support::plugin::{cmd, config, session_row, Plugin};
use crate::support::*;

/// A pid that no process has any more.
fn dead_pid() -> String {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid.to_string()
}

#[test]
fn watch_exits_1_when_its_session_ends_pending() {
    let s = Scratch::new("p15-watch");
    let acme = Plugin::new(&s, "acme");
    let config = config(&s, "2s", &[&acme]);
    let (stuck, fine) = (format!("stuck{}", unique()), format!("fine{}", unique()));
    acme.insert("refuses", &[(SESSION, stuck.as_str())]);
    acme.set_mode("refuses", Some("fatal"));
    acme.insert("goes", &[(SESSION, fine.as_str())]);

    let watch = |session: &str| {
        run(cmd(&s, &config).args(["watch", "--owner-pid", &dead_pid(), "--session", session]))
    };
    let out = watch(&stuck);
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert_eq!(out.stdout, format!("ready {stuck}\n"));
    assert_eq!(
        session_row(&mut cmd(&s, &config), &stuck)["state"],
        "pending"
    );

    let out = watch(&fine);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(
        session_row(&mut cmd(&s, &config), &fine)["state"],
        "reclaimed"
    );
    assert!(!acme.exists("goes") && acme.exists("refuses"));
}

#[test]
fn the_wrapper_exits_125_on_a_bad_config_and_runs_nothing() {
    let s = Scratch::new("p15-125");
    let file = s.path().join("bad.toml");
    let marker = s.path().join("ran");
    let program = ["--", "sh", "-c", "touch \"$0\"", marker.to_str().unwrap()];
    std::fs::write(&file, "[watch]\ngrace = \"10m\"\nmystery = 1\n").unwrap();
    let out = run(sandguard(&s).arg("--config").arg(&file).args(program));
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(
        out.stderr.contains(&format!("{}:3:", file.display())) && out.stderr.contains("mystery"),
        "the error names the file, the line and the key: {}",
        out.stderr
    );
    std::fs::write(&file, "[reclaim]\ndeadline = \"soon\"\n").unwrap();
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &file)
        .args(["run"])
        .args(program));
    assert_eq!(out.code, 125, "{}", out.stderr);
    assert!(out.stderr.contains("reclaim.deadline"), "{}", out.stderr);
    assert!(!marker.exists(), "the program never ran");
    assert!(
        !s.path().join("state/sandguard/sessions").exists()
            || std::fs::read_dir(s.path().join("state/sandguard/sessions"))
                .unwrap()
                .next()
                .is_none(),
        "no session was started"
    );
}

#[test]
fn release_and_detach_outside_a_session_exit_2() {
    let s = Scratch::new("p15-outside");
    for verb in ["claim", "release", "detach"] {
        let out = run(sandguard(&s)
            .env_remove("SANDGUARD_FD")
            .env_remove("SANDGUARD_SESSION")
            .args([verb, "docker", "0123456789ab"]));
        assert_eq!(out.code, 2, "{verb}: {}", out.stderr);
        assert!(
            out.stderr.contains("not inside a sandguard session"),
            "{verb}: {}",
            out.stderr
        );
        // A descriptor number that is not open in this process is no session either.
        let out = run(sandguard(&s)
            .env("SANDGUARD_FD", "1017")
            .env("SANDGUARD_SESSION", "0123456789abcdef0123456789abcdef")
            .args([verb, "docker", "0123456789ab"]));
        assert_eq!(out.code, 2, "{verb}: {}", out.stderr);
        assert!(out.stderr.contains("not open"), "{verb}: {}", out.stderr);
    }
}

/// Linux's fallback: a seccomp filter takes its exit watch (`pidfd_open`) away.
#[cfg(target_os = "linux")]
mod polling {
    use std::process::Command;
    use std::time::Duration;

    use crate::support::plugin::session_row;
    use crate::support::*;

    /// Makes `pidfd_open` fail with `ENOSYS` in what `cmd` starts (and everything that inherits
    /// from it). Only the native syscall number is filtered; that is the one sandguard calls.
    /// Linux's: a seccomp filter, on Linux's exit watch.
    fn without_pidfd_open(cmd: &mut Command) {
        use std::os::unix::process::CommandExt;
        let op = |code: u32, k: u32, jt: u8, jf: u8| libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        };
        let filter = [
            // A = seccomp_data.nr
            op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
            op(
                libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
                libc::SYS_pidfd_open as u32,
                0,
                1,
            ),
            op(
                libc::BPF_RET | libc::BPF_K,
                libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
                0,
                0,
            ),
            op(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW, 0, 0),
        ];
        // SAFETY: the closure runs between fork and exec and makes only two prctl(2) calls, which
        // are async-signal-safe; the program it points to lives in the closure, for the call.
        unsafe {
            cmd.pre_exec(move || {
                let program = libc::sock_fprog {
                    len: filter.len() as u16,
                    filter: filter.as_ptr() as *mut libc::sock_filter,
                };
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &program as *const libc::sock_fprog,
                    ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }

    #[test]
    fn the_proc_polling_fallback_sees_the_owner_die() {
        require_docker();
        let _g = shared();
        let s = Scratch::new("p15-poll");
        let mut wrapper = sandguard(&s);
        without_pidfd_open(&mut wrapper);
        let mut owner = Owner::start(wrapper, &s);
        let _reaper = crate::support::plugin::SidecarReaper(owner.session.clone());
        let log = s
            .path()
            .join("state/sandguard/sessions")
            .join(format!("{}.log", owner.session));
        // The sidecar writes its log while the program already runs (it is not waited for):
        // read until the line is there, not once.
        let fell_back = || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains("pidfd_open is unavailable") && text.contains("polling /proc")
        };
        eventually(
            Duration::from_secs(10),
            "the sidecar fell back to polling",
            fell_back,
        );
        let mut r = Resources::default();
        let labels = owner.label_pairs();
        let container = r.container(&crate::support::plugin::pairs(&labels));
        owner.kill();
        eventually(
            Duration::from_secs(5),
            "the owner's container is reclaimed by the polling sidecar",
            || !container_exists(&container),
        );
        eventually(
            Duration::from_secs(10),
            "the session ends reclaimed",
            || session_row(&mut sandguard(&s), &owner.session)["state"] == "reclaimed",
        );
    }
}
