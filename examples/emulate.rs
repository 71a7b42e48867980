//! The test suite's provider emulators as a standalone process, for test suites in other
//! languages: the Node tests (`tests/node`) run the vendors' own JS SDK (`e2b`) against the
//! very emulator the Rust suite uses (`tests/support/e2b.rs` on `tests/support/emu.rs`,
//! included here by path, as the benches include them, not copied), so both suites hold the
//! SDK and the sidecar to one model of the service.
//!
//! Run: `cargo run --example emulate -- e2b KEY`. Starts the E2B emulator on 127.0.0.1 (an
//! ephemeral port), accepting `X-API-Key: KEY`; prints exactly one line on stdout,
//! `url=http://127.0.0.1:PORT`; then serves until stdin reaches EOF (so give it a pipe the
//! parent holds open: `</dev/null` ends it at once) or SIGTERM or SIGINT comes, and exits 0.
//! The emulator starts empty and without faults; point the SDK at it with
//! `E2B_API_URL=http://127.0.0.1:PORT`. With `EMULATE_LOG=1`, every request is logged on
//! stderr once answered (`METHOD PATH STATUS`; status 0 for a dropped connection).

#[path = "../tests/support/e2b.rs"]
mod e2b;
#[path = "../tests/support/emu.rs"]
mod emu;

use std::io::{Read, Write};
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};

const USAGE: &str = "usage: emulate e2b KEY";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (emu, _state) = match args.as_slice() {
        [provider, key] if provider == "e2b" && !key.is_empty() => e2b::start(key),
        _ => {
            eprintln!("{USAGE}");
            std::process::exit(2);
        }
    };
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "url={}", emu.url)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        std::process::exit(1);
    }
    drop(stdout);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        // stdin on a plain thread: reading it blocks, and its EOF is the parent going away.
        let (eof_tx, eof_rx) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = [0u8; 4096];
            let mut stdin = std::io::stdin().lock();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            let _ = eof_tx.send(());
        });
        let log = std::env::var_os("EMULATE_LOG").is_some_and(|v| !v.is_empty() && v != "0");
        let logger = async {
            if !log {
                return std::future::pending().await;
            }
            let mut seen = 0;
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let hits = emu.hits();
                for h in hits.iter().skip(seen) {
                    eprintln!("{} {} {}", h.method, h.path, h.status);
                }
                seen = hits.len();
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = eof_rx => {}
            () = logger => {}
        }
    });
    // The emulator's server thread runs forever: leave without waiting for it.
    std::process::exit(0);
}
