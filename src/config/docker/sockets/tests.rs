//! The socket lists and the search, against fake homes holding real bound Unix sockets.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use super::*;

/// A fake Mac under a scratch directory: a home, a `TMPDIR`, a `COLIMA_HOME`, and the system
/// socket's directory; removed on drop.
pub(crate) struct FakeMac {
    pub(crate) root: PathBuf,
    pub(crate) env: HashMap<String, String>,
}

impl FakeMac {
    pub(crate) fn new(tag: &str) -> FakeMac {
        let root = std::env::temp_dir().join(format!("sg-sock-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let env = [
            ("HOME", root.join("home")),
            ("TMPDIR", root.join("tmp")),
            ("COLIMA_HOME", root.join("colima-home")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.display().to_string()))
        .collect();
        FakeMac { root, env }
    }

    /// The macOS list for this fake Mac, its `/var/run/docker.sock` moved under the root so
    /// that the machine running the test has no say.
    pub(crate) fn list(&self) -> Vec<Candidate> {
        candidates(Platform::MacOs, &self.env)
            .into_iter()
            .map(|c| match c.path == Path::new(DEFAULT_SOCKET) {
                true => Candidate {
                    path: self.root.join("var/run/docker.sock"),
                    ..c
                },
                false => c,
            })
            .collect()
    }

    /// A listening socket at `path`, as an engine would leave it: in a directory only its
    /// owner writes, whatever the umask.
    pub(crate) fn bind(path: &Path) -> UnixListener {
        let dir = path.parent().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        chmod(dir, 0o755);
        UnixListener::bind(path).unwrap()
    }
}

impl Drop for FakeMac {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub(crate) fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub(crate) fn address(c: &Candidate) -> String {
    format!("unix://{}", c.path.display())
}

#[test]
fn the_macos_order_is_desktop_colima_orbstack_rancher_podman_default() {
    let mac = FakeMac::new("order");
    let (home, root) = (mac.root.join("home"), &mac.root);
    let want = [
        ("Docker Desktop", home.join(".docker/run/docker.sock")),
        ("Colima", root.join("colima-home/default/docker.sock")),
        ("Colima", home.join(".colima/default/docker.sock")),
        ("Colima", home.join(".config/colima/default/docker.sock")),
        ("OrbStack", home.join(".orbstack/run/docker.sock")),
        ("Rancher Desktop", home.join(".rd/docker.sock")),
        (
            "Podman machine",
            root.join("tmp/podman/podman-machine-default-api.sock"),
        ),
        (
            "Podman machine",
            home.join(".local/share/containers/podman/machine/podman.sock"),
        ),
        ("the default socket", PathBuf::from("/var/run/docker.sock")),
    ];
    let got = candidates(Platform::MacOs, &mac.env);
    assert_eq!(got.len(), want.len(), "{got:#?}");
    for (c, (name, path)) in got.iter().zip(want) {
        assert!(c.name.starts_with(name), "{c:?} is not {name}");
        assert_eq!(c.path, path);
    }
}

#[test]
fn each_macos_engine_socket_alone_is_found() {
    let mac = FakeMac::new("alone");
    for c in mac.list() {
        let listener = FakeMac::bind(&c.path);
        let found = search(&mac.list());
        assert_eq!(
            found.address.as_ref().map(DaemonAddress::expose),
            Ok(address(&c).as_str())
        );
        assert_eq!(found.origin, Origin::Found);
        assert!(found.via.starts_with(c.name), "{}", found.via);
        assert!(found.via.contains("first"), "{}", found.via);
        assert!(!found.via.contains("also present"), "{}", found.via);
        drop(listener);
        std::fs::remove_file(&c.path).unwrap();
    }
}

/// With every socket of the list present, then every one but the first, and so on: the first
/// present wins, and every other present one is named.
#[test]
fn with_several_the_first_in_the_order_wins_and_the_others_are_named() {
    let mac = FakeMac::new("several");
    let list = mac.list();
    let _listeners: Vec<UnixListener> = list.iter().map(|c| FakeMac::bind(&c.path)).collect();
    for (i, chosen) in list.iter().enumerate() {
        let found = search(&list);
        assert_eq!(
            found.address.as_ref().map(DaemonAddress::expose),
            Ok(address(chosen).as_str())
        );
        let (why, others) = found
            .via
            .split_once("; also present: ")
            .unwrap_or((&found.via, ""));
        assert!(why.starts_with(chosen.name), "{why}");
        for other in &list[i + 1..] {
            let named = format!("{} {}", other.name, other.path.display());
            assert!(others.contains(&named), "{named} missing from {others}");
        }
        assert!(
            !others.contains(&chosen.path.display().to_string()),
            "{others}"
        );
        match i + 1 == list.len() {
            true => assert_eq!(others, ""),
            false => assert!(found.via.ends_with("to use another"), "{}", found.via),
        }
        std::fs::remove_file(&chosen.path).unwrap();
    }
}

#[test]
fn what_is_not_a_socket_is_skipped_and_a_link_to_one_counts() {
    let mac = FakeMac::new("kinds");
    let list = mac.list();
    let (desktop, colima_home, colima) = (&list[0], &list[1], &list[2]);
    std::fs::create_dir_all(desktop.path.parent().unwrap()).unwrap();
    std::fs::write(&desktop.path, "").unwrap();
    std::fs::create_dir_all(&colima_home.path).unwrap();
    let dangling = &list[3].path;
    std::fs::create_dir_all(dangling.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(mac.root.join("nowhere.sock"), dangling).unwrap();
    let _live = FakeMac::bind(&colima.path);
    let system = list.last().unwrap();
    std::fs::create_dir_all(system.path.parent().unwrap()).unwrap();
    chmod(system.path.parent().unwrap(), 0o755);
    std::os::unix::fs::symlink(&colima.path, &system.path).unwrap();

    let found = search(&list);
    assert_eq!(
        found.address.as_ref().map(DaemonAddress::expose),
        Ok(address(colima).as_str())
    );
    for skipped in [&desktop.path, &colima_home.path, dangling] {
        let shown = skipped.display().to_string();
        assert!(!found.via.contains(&shown), "{shown} in {}", found.via);
    }
    assert!(
        found.via.ends_with(&format!(
            "also present: the default socket {} (a link to the same socket)",
            system.path.display()
        )),
        "{}",
        found.via
    );
}

#[test]
fn with_none_the_default_address_names_every_place_looked_at() {
    let mac = FakeMac::new("none");
    let list = mac.list();
    let found = search(&list);
    assert_eq!(
        found.address.as_ref().map(DaemonAddress::expose),
        Ok(DEFAULT_HOST)
    );
    let looked: Vec<PathBuf> = list.iter().map(|c| c.path.clone()).collect();
    assert_eq!(
        found.origin,
        Origin::Default {
            looked: looked.clone()
        }
    );
    assert!(
        found.via.contains("no engine socket exists"),
        "{}",
        found.via
    );
    for path in looked {
        assert!(
            found.via.contains(&path.display().to_string()),
            "{}",
            found.via
        );
    }
}

/// A fake Linux user: a runtime directory (`XDG_RUNTIME_DIR`) under a scratch root.
pub(crate) fn fake_linux(tag: &str) -> FakeMac {
    let mut fake = FakeMac::new(tag);
    let runtime = fake.root.join("run-user").display().to_string();
    fake.env.insert("XDG_RUNTIME_DIR".into(), runtime);
    fake
}

/// The Linux list for `fake`, its system sockets moved under the root so that the machine
/// running the test has no say.
pub(crate) fn linux_list(fake: &FakeMac) -> Vec<Candidate> {
    candidates(Platform::Linux, &fake.env)
        .into_iter()
        .map(|c| match c.path.starts_with(&fake.root) {
            true => c,
            false => Candidate {
                path: fake.root.join(c.path.strip_prefix("/").unwrap()),
                ..c
            },
        })
        .collect()
}

#[test]
fn the_linux_order_is_rootless_docker_rootless_podman_rootful_podman_default() {
    let fake = fake_linux("linux-order");
    let runtime = fake.root.join("run-user");
    assert_eq!(
        candidates(Platform::Linux, &fake.env),
        [
            Candidate {
                name: ROOTLESS_DOCKER,
                path: runtime.join("docker.sock"),
            },
            Candidate {
                name: ROOTLESS_PODMAN,
                path: runtime.join("podman/podman.sock"),
            },
            Candidate {
                name: ROOTFUL_PODMAN,
                path: PathBuf::from("/run/podman/podman.sock"),
            },
            Candidate {
                name: DEFAULT,
                path: PathBuf::from("/var/run/docker.sock"),
            },
        ]
    );
    // Each found in that order: bound one at a time, last first, each new one wins and names
    // the ones after it as also present.
    let list = linux_list(&fake);
    let mut listeners = Vec::new();
    for (n, c) in list.iter().enumerate().rev() {
        listeners.push(FakeMac::bind(&c.path));
        let host = search(&list);
        assert_eq!(
            host.address.as_ref().map(DaemonAddress::expose),
            Ok(address(c).as_str()),
            "{c:?}"
        );
        assert!(host.via.starts_with(c.name), "{}", host.via);
        for later in &list[n + 1..] {
            assert!(
                host.via.contains(&later.path.display().to_string()),
                "{}",
                host.via
            );
        }
    }
}

#[test]
fn without_a_runtime_directory_the_users_is_run_user_uid() {
    let none: HashMap<String, String> = HashMap::new();
    let run = PathBuf::from(format!("/run/user/{}", crate::unix::geteuid()));
    let paths: Vec<PathBuf> = candidates(Platform::Linux, &none)
        .into_iter()
        .map(|c| c.path)
        .collect();
    assert_eq!(
        &paths[..2],
        [run.join("docker.sock"), run.join("podman/podman.sock")]
    );
    let relative: HashMap<String, String> = [("XDG_RUNTIME_DIR", "run")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(
        candidates(Platform::Linux, &relative),
        candidates(Platform::Linux, &none)
    );
}

#[test]
fn the_linux_list_holds_no_socket_of_the_home() {
    let fake = fake_linux("linux-home");
    let _listeners: Vec<UnixListener> =
        fake.list().iter().map(|c| FakeMac::bind(&c.path)).collect();
    assert!(candidates(Platform::Linux, &fake.env)
        .iter()
        .all(|c| !c.path.starts_with(fake.root.join("home"))));
}

#[test]
fn unset_or_relative_path_variables_leave_their_candidates_out() {
    let none: HashMap<String, String> = HashMap::new();
    let paths = |env: &HashMap<String, String>| -> Vec<PathBuf> {
        candidates(Platform::MacOs, env)
            .into_iter()
            .map(|c| c.path)
            .collect()
    };
    assert_eq!(
        paths(&none),
        [
            PathBuf::from("/tmp/podman/podman-machine-default-api.sock"),
            PathBuf::from("/var/run/docker.sock"),
        ]
    );
    let relative: HashMap<String, String> = [("HOME", "me"), ("TMPDIR", "t"), ("COLIMA_HOME", "c")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert_eq!(paths(&relative), paths(&none));
}

#[test]
fn a_colima_home_that_is_the_home_colima_is_looked_at_once() {
    let mut mac = FakeMac::new("dup");
    let dot_colima = mac.root.join("home/.colima").display().to_string();
    mac.env.insert("COLIMA_HOME".into(), dot_colima);
    let colima: Vec<_> = candidates(Platform::MacOs, &mac.env)
        .into_iter()
        .filter(|c| c.name == COLIMA)
        .map(|c| c.path)
        .collect();
    assert_eq!(
        colima,
        [
            mac.root.join("home/.colima/default/docker.sock"),
            mac.root.join("home/.config/colima/default/docker.sock"),
        ]
    );
}
