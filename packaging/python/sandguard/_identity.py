"""The owner's identity, exactly as the sidecar computes it (mirrors src/identity/mod.rs): the
``sandguard.owner`` label a sandbox carries, and the label names.

A label that differs by one character from the sidecar's makes a sandbox nobody's, so every
field is read as the Rust side reads it: the machine id's and boot id's first 16 hex digits,
the start time from field 22 of ``/proc/PID/stat`` (after the last ``)``, since a process name
may hold one), and the pid namespace's inode.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

from ._outcome import SandguardError

#: The label carrying the session id.
LABEL_SESSION = "sandguard.session"
#: The label carrying the owner's identity (``<machine16>-<boot16>-<pid>-<start>``).
LABEL_OWNER = "sandguard.owner"

_UNKNOWN_MACHINE = "0000000000000000"


def _short_hex(text: str) -> str:
    """The first 16 hex digits of an id, lower-case, everything else dropped."""
    return "".join(c for c in text if c in "0123456789abcdefABCDEF")[:16].lower()


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _machine() -> str:
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        text = _read(path)
        if text is not None:
            short = _short_hex(text)
            return short if len(short) == 16 else _UNKNOWN_MACHINE
    return _UNKNOWN_MACHINE


def _boot() -> str:
    return _short_hex(_read("/proc/sys/kernel/random/boot_id") or "")


def _start_time(pid: int) -> int:
    """Field 22 of /proc/PID/stat (clock ticks after boot), read after the last ')'."""
    text = _read(f"/proc/{pid}/stat")
    if text is None:
        raise SandguardError(f"cannot read /proc/{pid}/stat (sandguard needs Linux /proc)")
    fields = text[text.rindex(")") + 1 :].split()
    return int(fields[22 - 3])


def _pid_namespace() -> Optional[int]:
    """The inode of this process's pid namespace (``/proc/self/ns/pid``)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def owner_label(pid: Optional[int] = None, binary: Optional[str] = None) -> str:
    """The ``sandguard.owner`` label of a process (default: this one), exactly as the sidecar
    computes it: ``<machine16>-<boot16>-<pid>-<start>-<pidns>``, where ``pidns`` is the pid
    namespace the pid is numbered in (a sweep in another namespace judges it "unknown").

    On Linux it is read here, from ``/proc``, as the Rust side reads it. Elsewhere (macOS has no
    ``/proc``; its start time comes from ``proc_pidinfo``) the sandguard ``binary`` is asked
    (``sandguard identity --pid PID``), so the label is the platform layer's own, not a second
    copy of it."""
    pid = os.getpid() if pid is None else pid
    if not sys.platform.startswith("linux"):
        if binary is None:
            raise SandguardError("the owner label needs the sandguard binary on this platform")
        return _ask(binary, pid)
    base = f"{_machine()}-{_boot()}-{pid}-{_start_time(pid)}"
    ns = _pid_namespace()
    return base if ns is None else f"{base}-{ns}"


def _ask(binary: str, pid: int) -> str:
    """``sandguard identity --pid PID``: the label as the binary computes it."""
    try:
        done = subprocess.run(
            [binary, "identity", "--pid", str(pid)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandguardError(f"cannot run {binary} identity: {e}") from e
    label = done.stdout.strip()
    if done.returncode != 0 or not label:
        raise SandguardError(f"{binary} identity --pid {pid} failed: {done.stderr.strip()}")
    return label
