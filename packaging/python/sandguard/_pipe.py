"""The two pipes between this process and its sidecar, at the byte level: a line read from
the sidecar's stdout within a deadline (:func:`read_line`), and a write to the control pipe
that never kills the process with ``SIGPIPE`` (:func:`write_without_sigpipe`).

What the lines mean is elsewhere: the ready line in :mod:`sandguard._sidecar`, the outcome
in :mod:`sandguard._outcome`, the control lines in :mod:`sandguard._control`.
"""

from __future__ import annotations

import os
import select
import signal
import time
from typing import Optional


def readable(fd: int, timeout: float) -> bool:
    """Whether `fd` is readable (or at EOF) within `timeout` seconds. poll, not select: a
    program with many files open has descriptors above FD_SETSIZE."""
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(max(0, int(timeout * 1000) + 1)))


def read_line(fd: int, timeout: float) -> Optional[str]:
    """One line from the sidecar's stdout (without its newline; ``""`` at EOF), or ``None``
    when none came within `timeout` seconds. Reads one byte at a time past the first
    ``poll``: nothing after the line may be taken from the pipe."""
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n") and len(buf) <= 4096:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if not readable(fd, left):
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            break
        buf += chunk
    return buf.decode("utf-8", "replace").split("\n", 1)[0].strip()


def write_without_sigpipe(fd: int, data: bytes) -> None:
    """One ``os.write`` that never raises ``SIGPIPE`` in this process, whatever its SIGPIPE
    disposition: a pipe without a reader is ``BrokenPipeError``, nothing else.

    Python ignores SIGPIPE by default, but a program may have set ``SIG_DFL`` (to die quietly
    in a shell pipeline, say). SIGPIPE is blocked in this thread for the write (the kernel
    sends it to the writing thread); if the write failed with EPIPE, the SIGPIPE it raised is
    taken off the pending set (``sigtimedwait`` with a zero timeout) before the old mask comes
    back. A SIGPIPE already pending before the call is left alone. Mirrors
    ``write_without_sigpipe`` in src/unix/signal.rs.
    """
    sigpipe = getattr(signal, "SIGPIPE", None)
    if sigpipe is None or not hasattr(signal, "pthread_sigmask"):
        os.write(fd, data)
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {sigpipe})
    try:
        was_pending = sigpipe in signal.sigpending()
        try:
            os.write(fd, data)
        except BrokenPipeError:
            if not was_pending:
                signal.sigtimedwait({sigpipe}, 0)
            raise
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)

