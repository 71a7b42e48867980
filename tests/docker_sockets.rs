//! The engines' sockets, through the real binary: with nothing naming a daemon, `sandguard
//! providers` says which socket it chose and why (on Linux, `/var/run/docker.sock`, the one
//! socket looked for), and a daemon that does not answer is reported with what chose its
//! address. The macOS list and the order are unit tests (`config::docker::sockets`).

use crate::docker_context::{bare, docker_detail as docker_row};
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
