//! What users deploy from: the Kubernetes manifests and README's fleet config.

use super::*;

/// The Kubernetes manifests parse (PyYAML; tests/run.sh installs python3-yaml), the
/// Deployment runs the fleet sweep with the store from a Secret, and the pod's sandguard is a
/// native sidecar registered in the same store.
#[test]
fn the_kubernetes_manifests_run_the_fleet_sweep_and_a_native_sidecar() {
    let load = crate::cli::image::kubernetes_manifest;
    let from_secret = |env: &serde_json::Value, var: &str| {
        env.as_array().unwrap().iter().any(|e| {
            e["name"] == var && e["valueFrom"]["secretKeyRef"]["name"] == "sandguard-fleet"
        })
    };
    let d = load("sweep-deployment.yaml");
    assert_eq!(d["kind"], "Deployment");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args[..3], ["sweep", "--fleet", "--every"]);
    assert!(from_secret(&c["env"], "SANDGUARD_FLEET_STORE"), "{c}");
    assert!(from_secret(&c["env"], "SANDGUARD_FLEET_PASSWORD"), "{c}");
    let p = load("pod-native-sidecar.yaml");
    let sidecar = &p["spec"]["initContainers"][0];
    assert_eq!(sidecar["restartPolicy"], "Always", "a native sidecar");
    // The image has no shell: its entrypoint, sandguard, is given `watch` and its options
    // (tests/cli/image.rs runs them in the image).
    assert!(sidecar["command"].is_null(), "{sidecar}");
    assert_eq!(sidecar["args"][0], "watch");
    assert_eq!(sidecar["args"][1], "--owner-pid-file");
    // Both run the image README.md's Install section builds and pushes.
    let image = format!(
        "registry.example.com/sandguard:{}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(sidecar["image"], image.as_str());
    assert_eq!(c["image"], image.as_str());
    assert!(
        from_secret(&sidecar["env"], "SANDGUARD_FLEET_STORE"),
        "{sidecar}"
    );
    assert_eq!(p["spec"]["shareProcessNamespace"], true);
}

/// The documentation's `[fleet]` example (the block marked `run fleet-config`, in the book's
/// fleet chapter) is a valid config: `sandguard sessions --fleet` reads it, and fails only for
/// want of that Redis (exit 1, the password masked), not for the config.
#[test]
fn the_readmes_fleet_config_is_a_valid_config() {
    let text = crate::cli::readme::block("fleet-config");
    let s = Scratch::new("fleet-readme");
    // The example's Redis does not exist here: point its host at a closed loopback port.
    let text = text.replace("redis.internal:6380", "127.0.0.1:1");
    let config = s.file("fleet.toml", text);
    let out = run(sandguard(&s)
        .env("SANDGUARD_CONFIG", &config)
        .env("SANDGUARD_FLEET_PASSWORD", "readme-secret")
        .args(["sessions", "--fleet"]));
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .contains("fleet store rediss://sandguard@127.0.0.1:1/0"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("readme-secret"), "{}", out.stderr);
}
