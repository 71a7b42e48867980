//! The Docker API proxy's trust rules, for real: a claim names only what this
//! session brought into being, and a create the proxy cannot stamp is refused.
//!
//! - A volume that existed before survives `docker volume create` and `docker run -v` of its
//!   name through the proxy, and the owner's SIGKILL.
//! - A named volume a `docker run -v` / `--mount` brought into being is labelled, claimed and
//!   reclaimed.
//! - An image committed through the proxy carries no session: a container started from it
//!   elsewhere survives the reclaim.
//! - Raw bytes over the proxy's socket ([`raw`]): encoded and absolute-form targets and
//!   lowercase `labels` keys are stamped; heads the proxy cannot parse and bodies it cannot
//!   stamp are refused, and nothing reaches the daemon unstamped.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::*;
use crate::watch::wrapper::{guarded_with, unsafe_kill, wait_for_file, Job};

mod raw;

/// What a test made on the shared daemon; removed on drop (containers by id or by the test's
/// own marker label, volumes and images by name).
#[derive(Default)]
struct Made {
    containers: Vec<String>,
    markers: Vec<String>,
    volumes: Vec<String>,
    images: Vec<String>,
}

impl Drop for Made {
    fn drop(&mut self) {
        let mut containers = self.containers.clone();
        for m in &self.markers {
            containers.extend(marked(m));
        }
        for c in containers {
            let _ = docker(&["rm", "-f", "-v", &c]);
        }
        for v in &self.volumes {
            let _ = docker(&["volume", "rm", "-f", v]);
        }
        for i in &self.images {
            let _ = docker(&["rmi", "-f", i]);
        }
    }
}

/// Every failed check of a test, reported together at its end (after its cleanup-relevant
/// steps ran), so one run shows which cases fail.
#[derive(Default)]
struct Faults(Vec<String>);

impl Faults {
    fn check(&mut self, ok: bool, what: impl std::fmt::Display) {
        if !ok {
            self.0.push(what.to_string());
        }
    }
    fn eq<T: PartialEq + std::fmt::Debug>(&mut self, got: T, want: T, what: &str) {
        self.check(got == want, format!("{what}: {got:?}, expected {want:?}"));
    }
    fn none(&self) {
        assert!(
            self.0.is_empty(),
            "{} failed:\n{}",
            self.0.len(),
            self.0.join("\n")
        );
    }
}

fn docker(args: &[&str]) -> (bool, String) {
    let out = Command::new("docker").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success(), text)
}

/// Every container (running or not) that carries `sg-tp=MARKER`.
fn marked(marker: &str) -> Vec<String> {
    let filter = format!("label=sg-tp={marker}");
    let (_, out) = docker(&["ps", "-aq", "--no-trunc", "--filter", &filter]);
    out.lines().map(str::to_string).collect()
}

/// The labels of a container (`Config.Labels`), volume or image, as JSON.
fn labels(kind: &str, id: &str) -> serde_json::Value {
    let path = if kind == "volume" {
        ".Labels"
    } else {
        ".Config.Labels"
    };
    let (ok, out) = docker(&[kind, "inspect", "-f", &format!("{{{{json {path}}}}}"), id]);
    assert!(ok, "docker {kind} inspect {id} failed");
    json(&out)
}

fn session_of(kind: &str, id: &str) -> String {
    labels(kind, id)["sandguard.session"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A guarded owner behind the proxy that ran `script`, which ends by writing lines into
/// `$OUT/ids` (after the session id and the proxy socket, written here).
struct Owner {
    job: Job,
    session: String,
    socket: PathBuf,
    journal: PathBuf,
    out: PathBuf,
    lines: Vec<String>,
}

fn owner(s: &Scratch, script: &str) -> Owner {
    let out = s.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let script = format!(
        "set -e\nulimit -c 0\nOUT={out}\nprintf '%s\\n%s\\n' \"$SANDGUARD_SESSION\" \"$DOCKER_HOST\" > $OUT/head\n{script}\nexec sleep 3600\n",
        out = out.display()
    );
    let mut job = guarded_with(s, &["run", "--docker-proxy"], &script);
    let lines = wait_for_file(&out.join("ids"), &mut job);
    let head = std::fs::read_to_string(out.join("head")).unwrap();
    let mut head = head.lines();
    let session = head.next().unwrap().to_string();
    let socket = head.next().unwrap().strip_prefix("unix://").unwrap().into();
    let journal = s
        .path()
        .join("state/sandguard/sessions")
        .join(format!("{session}.journal"));
    Owner {
        job,
        session,
        socket,
        journal,
        out,
        lines,
    }
}

impl Owner {
    fn journal(&self) -> String {
        std::fs::read_to_string(&self.journal).unwrap_or_default()
    }

    /// SIGKILL, then wait until the sidecar has journaled the end of its reclaim.
    fn kill_and_wait(&mut self) {
        unsafe_kill(self.job.id() as i32, libc::SIGKILL);
        self.job.wait().unwrap();
        eventually(Duration::from_secs(20), "the reclaim ended", || {
            self.journal().contains(r#""ev":"end""#)
        });
    }
}

fn volume_file(volume: &str) -> String {
    let mount = format!("{volume}:/data");
    let args = ["run", "--rm", "--network", "none", "-v", &mount, IMAGE];
    docker(&[&args[..], &["cat", "/data/file"]].concat()).1
}

#[test]
fn existing_volume_survives_create_and_run_through_the_proxy() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-existing");
    let mut made = Made::default();
    let mut f = Faults::default();
    let vol = format!("sg-tp-precious-{}", unique());
    assert!(docker(&["volume", "create", "--label", "mine=yes", &vol]).0);
    made.volumes.push(vol.clone());
    let mount = format!("{vol}:/data");
    let fill = ["run", "--rm", "--network", "none", "-v", &mount, IMAGE];
    assert!(docker(&[&fill[..], &["sh", "-c", "echo keep > /data/file"]].concat()).0);

    let mut o = owner(
        &s,
        &format!(
            "docker volume create {vol} > $OUT/create
docker run --rm --network none -v {vol}:/data {IMAGE} cat /data/file > $OUT/cat
docker run --rm --network none --mount type=volume,src={vol},dst=/data {IMAGE} true
c=$(docker run -d --network none -v {vol}:/data {IMAGE} sleep 3600)
echo \"$c\" > $OUT/ids.tmp; mv $OUT/ids.tmp $OUT/ids"
        ),
    );
    made.containers.extend(o.lines.clone());
    let read = |f: &str| std::fs::read_to_string(o.out.join(f)).unwrap();
    f.eq(read("create").trim(), &vol, "docker volume create answered");
    f.eq(
        read("cat").as_str(),
        "keep\n",
        "the volume was used, not replaced",
    );
    let journal = o.journal();
    f.check(
        !journal.contains(&format!("volume/{vol}")),
        "a volume that existed before is never claimed",
    );
    f.eq(
        labels("volume", &vol),
        serde_json::json!({"mine": "yes"}),
        "its labels",
    );

    o.kill_and_wait();
    f.check(
        !container_exists(&o.lines[0]),
        "the proxy's container is reclaimed",
    );
    f.check(
        volume_exists(&vol),
        "the volume that existed before survives",
    );
    f.eq(volume_file(&vol).as_str(), "keep", "with its data");
    f.none();
}

/// A volume's name is not its identity. The program makes two named volumes through the
/// proxy (claimed), then removes one through the proxy and the other behind its back (on the
/// daemon's own socket). Someone outside any session then makes two unlabelled volumes of the
/// same names and writes to them (another terminal's `docker compose up`). The owner's death
/// leaves both, with their data: the removal through the proxy released its claim at once,
/// and the other claim is pinned to the volume the proxy made, so it never names the
/// stranger's. Before, the reclaim removed both by name ("removed … (claimed)").
#[test]
fn a_stranger_volume_that_reuses_a_claimed_name_survives_the_reclaim() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-reused");
    let mut made = Made::default();
    let mut f = Faults::default();
    let u = unique();
    let (released, pinned) = (format!("sg-tp-rel-{u}"), format!("sg-tp-pin-{u}"));
    made.volumes.extend([released.clone(), pinned.clone()]);
    let real =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let mut o = owner(
        &s,
        &format!(
            "a=$(docker run -d --network none -v {released}:/data {IMAGE} sleep 3600)
b=$(docker run -d --network none -v {pinned}:/data {IMAGE} sleep 3600)
docker rm -f \"$a\" \"$b\" > /dev/null
docker volume rm {released} > /dev/null
DOCKER_HOST={real} docker volume rm {pinned} > /dev/null
printf '%s\\n%s\\n' \"$a\" \"$b\" > $OUT/ids.tmp; mv $OUT/ids.tmp $OUT/ids"
        ),
    );
    made.containers.extend(o.lines.clone());
    let journal = o.journal();
    f.check(
        journal.contains(&format!(
            r#""ev":"release","provider":"docker","id":"volume/{released}""#
        )),
        format!("the removal through the proxy released the claim: {journal}"),
    );
    f.check(
        journal.contains(&format!(
            r#""ev":"release","provider":"docker","id":"{}""#,
            o.lines[0]
        )),
        "the container removed through the proxy was released too",
    );
    f.check(
        journal.contains(&format!(r#""id":"volume/{pinned}@"#)),
        format!("the volume claim is pinned to the volume made: {journal}"),
    );

    // A stranger takes both names again, in a later second than the proxy's volumes.
    std::thread::sleep(Duration::from_millis(1100));
    for v in [&released, &pinned] {
        assert!(
            docker(&["volume", "create", v]).0,
            "docker volume create {v}"
        );
        let mount = format!("{v}:/data");
        let fill = ["run", "--rm", "--network", "none", "-v", &mount, IMAGE];
        assert!(docker(&[&fill[..], &["sh", "-c", "echo theirs > /data/file"]].concat()).0);
    }

    o.kill_and_wait();
    for v in [&released, &pinned] {
        f.check(
            volume_exists(v),
            format!("the stranger's volume {v} was removed"),
        );
        f.eq(volume_file(v).as_str(), "theirs", "with its data");
    }
    let shown = run(sandguard(&s).args(["sessions", "show", &o.session]));
    f.check(
        !shown
            .stdout
            .lines()
            .any(|l| l.contains(&pinned) && l.contains("removed")),
        format!(
            "sessions show says a stranger's volume was removed: {}",
            shown.stdout
        ),
    );
    f.none();
}

#[test]
fn implicit_named_volumes_are_labelled_claimed_and_reclaimed() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-implicit");
    let mut made = Made::default();
    let mut f = Faults::default();
    let u = unique();
    let (bind, mount) = (format!("sg-tp-bind-{u}"), format!("sg-tp-mount-{u}"));
    made.volumes.extend([bind.clone(), mount.clone()]);
    let mut o = owner(
        &s,
        &format!(
            "a=$(docker run -d --network none -v {bind}:/data {IMAGE} sleep 3600)
b=$(docker run -d --network none --mount type=volume,src={mount},dst=/data,volume-label=sg-tp=mount {IMAGE} sleep 3600)
docker run --rm --network none -v /anonymous {IMAGE} true
printf '%s\\n%s\\n' \"$a\" \"$b\" > $OUT/ids.tmp; mv $OUT/ids.tmp $OUT/ids"
        ),
    );
    made.containers.extend(o.lines.clone());
    f.eq(
        session_of("volume", &bind),
        o.session.clone(),
        "-v NAME:/path is stamped",
    );
    f.eq(
        session_of("volume", &mount),
        o.session.clone(),
        "--mount type=volume is stamped",
    );
    f.eq(
        labels("volume", &mount)["sg-tp"].clone(),
        "mount".into(),
        "its own labels",
    );
    let journal = o.journal();
    for v in [&bind, &mount] {
        f.check(
            journal.contains(&format!("volume/{v}")),
            format!("{v} is claimed"),
        );
    }

    o.kill_and_wait();
    for v in [&bind, &mount] {
        f.check(!volume_exists(v), format!("{v} is reclaimed"));
    }
    f.none();
}

#[test]
fn an_image_committed_through_the_proxy_carries_no_session() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-commit");
    let mut made = Made::default();
    let mut f = Faults::default();
    let u = unique();
    let (image, detached) = (format!("sg-tp-commit-{u}"), format!("sg-tp-commit2-{u}"));
    made.images.extend([image.clone(), detached.clone()]);
    let mut o = owner(
        &s,
        &format!(
            "c=$(docker run -d --network none {IMAGE} sleep 3600)
docker commit \"$c\" {image} > /dev/null
docker commit --change 'LABEL sandguard.detached=true' \"$c\" {detached} > /dev/null
echo \"$c\" > $OUT/ids.tmp; mv $OUT/ids.tmp $OUT/ids"
        ),
    );
    made.containers.extend(o.lines.clone());
    for i in [&image, &detached] {
        let l = labels("image", i);
        for key in ["session", "owner", "detached"] {
            let v = l[format!("sandguard.{key}")].as_str().unwrap_or_default();
            f.eq(v, "", &format!("{i}'s sandguard.{key}"));
        }
    }
    // Started elsewhere, outside any session.
    let args = ["run", "-d", "--network", "none", &image, "sleep", "3600"];
    let (ok, stranger) = docker(&args);
    assert!(ok);
    made.containers.push(stranger.clone());
    f.eq(
        session_of("container", &stranger),
        String::new(),
        "no session inherited",
    );

    o.kill_and_wait();
    f.check(
        !container_exists(&o.lines[0]),
        "the committed container is reclaimed",
    );
    f.check(
        container_exists(&stranger),
        "the container from the image survives",
    );
    f.none();
}

#[test]
fn a_create_asking_to_be_detached_survives_its_owner_and_a_plain_one_does_not() {
    require_docker();
    let _g = shared();
    let s = Scratch::new("tp-detached");
    let mut made = Made::default();
    let mut f = Faults::default();
    let marker = format!("detached-{}", unique());
    made.markers.push(marker.clone());
    let mut o = owner(
        &s,
        &format!(
            "a=$(docker run -d --network none --label sg-tp={marker} --label sandguard.detached=true {IMAGE} sleep 3600)
b=$(docker run -d --network none --label sg-tp={marker} {IMAGE} sleep 3600)
printf '%s\\n%s\\n' \"$a\" \"$b\" > $OUT/ids.tmp; mv $OUT/ids.tmp $OUT/ids"
        ),
    );
    let (kept, gone) = (o.lines[0].clone(), o.lines[1].clone());
    made.containers.extend([kept.clone(), gone.clone()]);
    f.eq(
        session_of("container", &kept),
        o.session.clone(),
        "the detached create is stamped",
    );
    f.eq(
        labels("container", &kept)["sandguard.detached"].clone(),
        "true".into(),
        "its own detached label is kept",
    );
    let journal = o.journal();
    f.check(
        journal
            .lines()
            .any(|l| l.contains(r#""ev":"detach""#) && l.contains(&kept)),
        format!("the detached create is journaled as a detach:\n{journal}"),
    );

    o.kill_and_wait();
    f.check(
        container_exists(&kept),
        "the container created detached survives its owner",
    );
    f.check(!container_exists(&gone), "the plain one is reclaimed");
    f.none();
}
