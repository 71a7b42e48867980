//! A gate a guarded program waits at until the test lets it go: a named pipe the program
//! reads a line from (`read go < PATH`), so that it lives exactly as long as the test needs,
//! with no sleep on either side.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A fifo in a scratch directory.
pub struct Gate(PathBuf);

impl Gate {
    /// Makes the fifo `name` in `dir`.
    pub fn new(dir: &Path, name: &str) -> Gate {
        let path = dir.join(name);
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo");
        assert!(made.success(), "mkfifo {}", path.display());
        Gate(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Lets the waiting program go: opens the fifo for writing once the program has it open
    /// for reading (until then the open fails with ENXIO), and writes its line.
    pub fn release(&self) {
        use std::os::unix::fs::OpenOptionsExt;
        let open = || {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.0)
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut fifo = loop {
            match open() {
                Ok(f) => break f,
                Err(e) => assert!(
                    Instant::now() < deadline,
                    "nothing waits at {}: {e}",
                    self.0.display()
                ),
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        std::io::Write::write_all(&mut fifo, b"go\n").expect("write to the fifo");
    }
}
