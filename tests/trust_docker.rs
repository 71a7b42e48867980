//! The Docker driver never touches what is not ours, through the real binary: a network claim
//! never reaches a stranger by name, a network held by a live stranger is left (and a stale
//! endpoint of a vanished container is cleared), a broken volume listing does not hide a
//! session's containers, and a label inherited from an image is not ownership.

use std::process::Command;
use std::time::Duration;

use crate::support::*;
use crate::wrapper::{guarded, unsafe_kill, wait_for_file};

fn docker_ok(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What a test made with plain `docker` beyond [`Resources`]; removed on drop.
#[derive(Default)]
struct Made(Vec<Vec<String>>);

impl Made {
    fn undo(&mut self, args: &[&str]) {
        self.0.push(args.iter().map(|s| s.to_string()).collect());
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for args in self.0.iter().rev() {
            let _ = Command::new("docker").args(args).output();
        }
    }
}

#[test]
fn a_network_claim_never_reaches_a_stranger_named_like_an_id() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("td-netname");
    let mut made = Made::default();
    // A stranger's network whose *name* is 24 hex digits: Docker resolves names before id
    // prefixes, so `DELETE /networks/NAME` would remove it.
    let name = format!("{}{}", unique(), unique());
    let stranger = docker_ok(&["network", "create", "--internal", &name]);
    made.undo(&["network", "rm", &stranger]);
    let own_name = format!("sg-it-own-{}", unique());
    made.undo(&["network", "rm", &own_name]);

    let ids = s.path().join("ids");
    let script = format!(
        r#"set -e
n=$(docker network create --internal {own_name})
sandguard claim docker "network/$(echo "$n" | cut -c1-12)"
sandguard claim docker "network/{name}"
echo "$n" > {ids}.tmp && mv {ids}.tmp {ids}
exec sleep 3600
"#,
        ids = ids.display()
    );
    let mut job = guarded(&s, &script);
    let own = wait_for_file(&ids, &mut job).remove(0);
    assert!(network_exists(&own));
    unsafe_kill(job.id() as i32, libc::SIGKILL);
    let _ = job.wait();

    eventually(
        Duration::from_secs(10),
        "the network claimed by its id prefix is removed",
        || !network_exists(&own),
    );
    eventually(Duration::from_secs(10), "the sidecar ends", || {
        let v = json(&run(sandguard(&s).args(["sessions", "--json"])).stdout);
        v["sessions"][0]["sidecar_alive"] == false
    });
    assert!(
        network_exists(&stranger),
        "a claim of network/{name} removed the stranger network named {name}"
    );
}
