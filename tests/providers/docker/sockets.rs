//! The engines' sockets, through the real binary: with nothing naming a daemon, `sandguard
//! providers` says which socket it chose and why (`/var/run/docker.sock` when it is the only
//! one; a socket in the user's runtime directory before it, the default named as also
//! present), and a daemon that does not answer is reported with what chose its address. The
//! lists and their order are unit tests (`config::docker::sockets`).

use crate::providers::docker::context::{bare, docker_detail as docker_row};
use crate::support::*;

#[test]
fn providers_names_the_socket_it_found_and_why() {
    require_docker();
    let s = Scratch::new("sockets");
    let why = "at unix:///var/run/docker.sock (from the default socket, the first engine socket \
               found in sandguard's order)";
    let out = run(bare(&s).args(["providers", "--json"]));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    let docker = docker_row(&out);
    assert_eq!(docker["reachable"], true, "{docker}");
    assert!(
        docker["detail"].as_str().unwrap().ends_with(why),
        "{docker}"
    );

    // The table a user reads says the same, and the debug log names it as the run starts.
    let out = run(bare(&s).env("SANDGUARD_LOG", "debug").arg("providers"));
    assert_eq!(out.code, 0, "{} {}", out.stdout, out.stderr);
    assert!(out.stdout.contains(why), "{}", out.stdout);
    assert!(
        out.stderr
            .contains("Docker daemon: unix:///var/run/docker.sock (the default socket, the first"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_daemon_that_does_not_answer_is_reported_with_what_chose_its_address() {
    let s = Scratch::new("sockets-gone");
    let gone = s.path().join("gone.sock");
    let out = run(bare(&s)
        .env("DOCKER_HOST", format!("unix://{}", gone.display()))
        .args(["providers", "--json"]));
    assert_eq!(out.code, 1, "{} {}", out.stdout, out.stderr);
    let docker = docker_row(&out);
    assert_eq!(docker["reachable"], false, "{docker}");
    let detail = docker["detail"].as_str().unwrap();
    assert!(detail.contains(&gone.display().to_string()), "{detail}");
    assert!(detail.ends_with("(from DOCKER_HOST)"), "{detail}");
}

/// A rootless Podman socket in the user's runtime directory comes before the system's
/// `/var/run/docker.sock`, and the choice names the other: never a silent guess. (Nothing
/// answers on the fake socket, so the row says unreachable, with why it was chosen.)
#[test]
fn a_socket_in_the_users_runtime_directory_wins_and_the_default_is_named() {
    require_docker();
    let s = Scratch::new("sockets-rootless");
    let runtime = s.path().join("run");
    let socket = runtime.join("podman/podman.sock");
    std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // Accepts and hangs up at once: the ping fails fast.
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            drop(conn);
        }
    });
    let out = run(bare(&s)
        .env("XDG_RUNTIME_DIR", &runtime)
        .args(["providers", "--json"]));
    assert_eq!(out.code, 1, "{} {}", out.stdout, out.stderr);
    let docker = docker_row(&out);
    assert_eq!(docker["reachable"], false, "{docker}");
    let detail = docker["detail"].as_str().unwrap();
    let why = "(from rootless Podman's socket, the first engine socket found in sandguard's \
               order; also present: the default socket /var/run/docker.sock; set DOCKER_HOST \
               or a Docker context to use another)";
    assert!(
        detail.contains(&format!("unix://{}", socket.display())),
        "{detail}"
    );
    assert!(detail.ends_with(why), "{detail}");
}
