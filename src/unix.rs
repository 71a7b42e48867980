//! The only module that calls libc directly. Every `unsafe` block carries a `SAFETY:` comment;
//! the rest of the crate calls the safe wrappers here.

use std::io;

/// Fills `buf` with random bytes from the kernel (`getrandom(2)`), for session ids and jitter.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the pointer and length describe `rest`, a live, writable slice we own.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += n as usize;
    }
    Ok(())
}

/// Whether file descriptor 1 (stdout) is a terminal.
pub fn stdout_is_terminal() -> bool {
    // SAFETY: isatty only inspects the descriptor number; no memory is passed.
    unsafe { libc::isatty(1) == 1 }
}
