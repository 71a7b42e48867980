//! What only Podman has: pods. Run by `tests/run.sh` step 1b against rootless Podman (with
//! `podman --remote`, a real client, at the socket `DOCKER_HOST` names), and skipped by name
//! in step 1, where dockerd runs: Docker has no pods. Each test fails loudly when the engine
//! is not Podman, never passing by skipping.
//!
//! A pod made with the session's labels shows as its infra container, which Podman will not
//! remove alone: the driver removes the pod, unless the pod holds a container that is not
//! the session's (`src/providers/docker/pod.rs`).

use std::process::Command;
use std::time::Duration;

use crate::providers::docker::{outcomes, short_deadline};
use crate::support::*;
use crate::watch::wrapper::{guarded_env, unsafe_kill, wait_for_file};
use sandguard::labels::SESSION;

/// The engine's socket, as the tests and their clients are given it.
fn socket() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into())
}

/// Panics unless the engine at `DOCKER_HOST` is Podman, with `podman` to reach it.
fn require_podman() {
    require_docker();
    let version = Command::new("docker")
        .args([
            "version",
            "--format",
            "{{.Server.Platform.Name}} {{range .Server.Components}}{{.Name}} {{end}}",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(
        version.contains("Podman"),
        "these tests need Podman at DOCKER_HOST (tests/run.sh step 1b runs them against \
         rootless Podman); the engine there is: {version}"
    );
    assert!(
        Command::new("podman")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "these tests need the podman client (tests/run.sh installs it)"
    );
}

/// `podman --remote` at the engine's socket; its trimmed output, or a panic naming the call.
fn podman(args: &[&str]) -> String {
    let out = Command::new("podman")
        .args(["--remote", "--url", &socket()])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "podman {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn pod_exists(name: &str) -> bool {
    Command::new("podman")
        .args(["--remote", "--url", &socket(), "pod", "exists", name])
        .status()
        .is_ok_and(|s| s.success())
}

/// Pods a test made, force-removed when it ends, whatever happened.
struct Pods(Vec<String>);

impl Drop for Pods {
    fn drop(&mut self) {
        for name in &self.0 {
            let _ = Command::new("podman")
                .args([
                    "--remote",
                    "--url",
                    &socket(),
                    "pod",
                    "rm",
                    "-f",
                    "-t",
                    "0",
                    name,
                ])
                .output();
        }
    }
}

/// A program makes a pod with its session's labels (`$SANDGUARD_LABELS`, one `--label` each)
/// and runs a container in it, labelled too; beside it a bystander pod of another session.
/// After the owner's SIGKILL the whole pod is gone, infra container and all, and the
/// bystander's pod is untouched.
#[test]
fn a_session_pod_goes_whole_after_its_owner_is_killed() {
    require_podman();
    let _g = shared();
    let s = Scratch::new("podman-pod");
    let u = unique();
    let (ours, theirs) = (format!("sg-pod-{u}"), format!("sg-bystander-{u}"));
    let _pods = Pods(vec![ours.clone(), theirs.clone()]);
    podman(&[
        "pod",
        "create",
        "--label",
        &format!("{SESSION}=other-{u}"),
        "--name",
        &theirs,
    ]);
    podman(&["run", "-d", "--pod", &theirs, IMAGE, "sleep", "600"]);
    let ids = s.path().join("ids");
    // The program reaches Podman itself (the proxy refuses Podman's own API).
    let script = format!(
        r#"set -e
labels=""; for l in $(echo "$SANDGUARD_LABELS" | tr , ' '); do labels="$labels --label $l"; done
podman --remote --url "$PODMAN_URL" pod create $labels --name {ours} >/dev/null
podman --remote --url "$PODMAN_URL" run -d --pod {ours} $labels {IMAGE} sleep 600 >/dev/null
echo "$SANDGUARD_SESSION" > {ids}.tmp && mv {ids}.tmp {ids}
sleep 600"#,
        ids = ids.display()
    );
    let mut owner = guarded_env(&s, &[("PODMAN_URL", &socket())], &[], &script);
    let session = wait_for_file(&ids, &mut owner)[0].clone();
    let infra = podman(&["pod", "inspect", "--format", "{{.InfraContainerID}}", &ours]);
    assert_eq!(
        podman(&[
            "container",
            "inspect",
            "--format",
            &format!("{{{{index .Config.Labels \"{SESSION}\"}}}}"),
            &infra
        ]),
        session,
        "Podman copies the pod's labels onto its infra container"
    );
    unsafe_kill(owner.id() as i32, libc::SIGKILL);
    let _ = owner.wait();
    eventually(
        Duration::from_secs(30),
        "the session's pod is removed",
        || !pod_exists(&ours),
    );
    assert!(
        !container_exists(&infra),
        "the infra container went with its pod"
    );
    assert!(pod_exists(&theirs), "the bystander's pod was removed");
    assert_eq!(
        podman(&["pod", "inspect", "--format", "{{.NumContainers}}", &theirs]),
        "2",
        "the bystander's pod lost a container"
    );
}

/// A pod of the session that also holds a container without the session's labels is left,
/// that container untouched, the session's own member removed and the infra container
/// reported unfinished, naming the pod and the stranger; once the stranger has gone, the
/// pod goes.
#[test]
fn a_pod_holding_a_strangers_container_is_left_until_it_goes() {
    require_podman();
    let _g = shared();
    let s = Scratch::new("podman-stranger");
    let u = unique();
    let session = format!("pd{u}");
    let pod = format!("sg-mixed-{u}");
    let _pods = Pods(vec![pod.clone()]);
    let label = format!("{SESSION}={session}");
    podman(&["pod", "create", "--label", &label, "--name", &pod]);
    let ours = podman(&[
        "run", "-d", "--pod", &pod, "--label", &label, IMAGE, "sleep", "600",
    ]);
    let stranger_name = format!("sg-stranger-{u}");
    let stranger = podman(&[
        "run",
        "-d",
        "--pod",
        &pod,
        "--name",
        &stranger_name,
        IMAGE,
        "sleep",
        "600",
    ]);
    let infra = podman(&["pod", "inspect", "--format", "{{.InfraContainerID}}", &pod]);
    let config = short_deadline(&s);
    let stop = || {
        run(sandguard(&s).arg("--config").arg(&config).args([
            "stop",
            "--all",
            "--session",
            &session,
            "--json",
        ]))
    };

    let out = stop();
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let results = outcomes(&out.stdout);
    assert_eq!(results[&ours].0, "removed", "{}", out.stdout);
    let (outcome, error) = &results[&infra];
    assert_eq!(outcome, "unfinished", "{}", out.stdout);
    assert!(
        error.contains(&pod) && error.contains(&stranger_name),
        "{error}"
    );
    assert!(error.contains("not of this session"), "{error}");
    assert!(
        pod_exists(&pod),
        "the pod was removed with a stranger in it"
    );
    assert_eq!(
        podman(&[
            "container",
            "inspect",
            "--format",
            "{{.State.Running}}",
            &stranger
        ]),
        "true",
        "the stranger was stopped or removed"
    );

    podman(&["rm", "-f", "-t", "0", &stranger]);
    let out = stop();
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    assert_eq!(outcomes(&out.stdout)[&infra].0, "removed", "{}", out.stdout);
    assert!(
        !pod_exists(&pod),
        "the pod was left once the stranger had gone"
    );
}
