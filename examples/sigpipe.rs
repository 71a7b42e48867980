//! A guarded program that outlives its sidecar, with SIGPIPE at its default disposition (as a
//! C program, or a Rust one that reset it, has it): once the sidecar is gone, its heartbeats
//! and claims must fail as errors, never kill the program with SIGPIPE.
//!
//! Run: `cargo run --example sigpipe`. Prints `ready SESSION PID`, then waits for a line on
//! stdin (the sidecar has been killed meanwhile), lets a few heartbeats fail, claims a
//! sandbox and prints `claim failed: REASON` (exit 0) or `claim succeeded` (exit 3).

use std::io::BufRead;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    sandguard::testing::unix::default_signal(libc::SIGPIPE)?;
    let guard = sandguard::Guard::builder()
        .heartbeat(Some(Duration::from_millis(50)))
        .start()?;
    println!("ready {} {}", guard.session(), std::process::id());
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    // Several heartbeats meet the closed pipe before the claim does.
    std::thread::sleep(Duration::from_millis(300));
    match guard.claim("docker", "0123456789abcdef") {
        Ok(()) => {
            println!("claim succeeded");
            std::process::exit(3);
        }
        Err(e) => println!("claim failed: {e}"),
    }
    // Dropping the guard says `bye` into the same closed pipe.
    drop(guard);
    Ok(())
}
