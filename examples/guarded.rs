//! A Rust program guarded by the SDK helper: it starts a sidecar for itself, creates one
//! labelled Docker container and one unlabelled one that it claims, then sleeps. However it
//! ends (a clean return, a panic, SIGKILL), both containers are reclaimed.
//!
//! Run: `cargo run --example guarded -- [SECONDS]` (default 30; `IMAGE` picks the image,
//! default `busybox`). Prints the session, then the two container ids, and at the end the
//! sidecar's word on the reclaim (`ended clean`, or what was left). With `drop` after SECONDS
//! it drops the guard instead of closing it, and its log (`tracing`, on stderr) says what was
//! left, if anything.

use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let image = std::env::var("IMAGE").unwrap_or_else(|_| "busybox".into());
    let guard = sandguard::Guard::start()?;
    println!("{}", guard.session());

    let labelled = docker(
        Command::new("docker")
            .args(["run", "-d", "--network", "none"])
            .args(guard.docker_label_args())
            .args([&image, "sleep", "600"]),
    )?;
    println!("{labelled}");
    let unlabelled = docker(Command::new("docker").args([
        "run",
        "-d",
        "--network",
        "none",
        &image,
        "sleep",
        "600",
    ]))?;
    guard.claim("docker", &unlabelled)?;
    println!("{unlabelled}");

    std::thread::sleep(std::time::Duration::from_secs(seconds));
    if std::env::args().nth(2).as_deref() == Some("drop") {
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .init();
        // Dropping the guard says `bye` too; what was left goes to the log.
        drop(guard);
        return Ok(());
    }
    // `close` says `bye`: both containers are reclaimed now, and it says how that went.
    println!("{}", guard.close()?);
    Ok(())
}

fn docker(cmd: &mut Command) -> Result<String, Box<dyn std::error::Error>> {
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}
