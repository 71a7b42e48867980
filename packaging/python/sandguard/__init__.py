"""Guard this Python process with sandguard: its sandboxes are reclaimed when it dies.

::

    import subprocess, sandguard

    with sandguard.guard() as g:
        # Stamp the session's labels on everything you create...
        subprocess.run(["docker", "run", "-d", *g.label_args(), "busybox", "sleep", "600"])
        # ...or claim what cannot carry labels.
        g.claim("e2b", sandbox_id)

``guard()`` starts ``sandguard watch`` as a sidecar for the current process (in its own
session, so a Ctrl-C to the terminal does not reach it), connected by a pipe, and waits until
it is ready (its session is on disk, its lock held). From then on, however this process ends
(``SIGKILL``, OOM, a crash, a plain exit), the sidecar reclaims every sandbox that carries the
session's labels, and every sandbox claimed. Leaving the ``with`` block (or ``close()``) says
``bye``: the sidecar reclaims what is still owned now and ends the session clean.

Decisions:

- An exception leaving the ``with`` block also says ``bye``: from Python's point of view the
  program is ending in an orderly way, and whatever it still owns should go now rather than
  when the process exits. To keep a sandbox beyond the block, ``detach()`` it (its TTL, if
  any, still applies).
- ``close()`` waits (by default at most 30 s) until the sidecar has finished reclaiming, so
  that after the block the sandboxes are gone. ``guard(wait=None)`` does not wait.
- A heartbeat (``renew``) is sent every 5 s from a daemon thread. The first one starts the
  sidecar's lease: a process that is alive but stuck (its threads frozen) for longer than the
  grace (``--grace``, default 10 minutes) loses its sandboxes too.
- Only the process that made the guard speaks for it: a forked child inherits the object but
  never sends ``bye`` (nor heartbeats) for its parent.
- Once the sidecar is gone (it was killed, or the session already ended), ``claim``,
  ``release``, ``detach`` and ``renew`` raise :class:`SandguardError` ("the session's sidecar
  is gone ..."), the heartbeat thread stops quietly, and ``close()`` returns. No write to the
  pipe ever kills the process with ``SIGPIPE``, even after
  ``signal.signal(signal.SIGPIPE, signal.SIG_DFL)``: SIGPIPE is blocked in the writing thread
  for the write, and the one a failed write raised is taken off the pending set.
- Child processes: :mod:`subprocess` closes every descriptor but 0, 1 and 2 in the child by
  default (``close_fds=True``), so ``sandguard claim`` run from Python needs the control pipe
  passed on: ``subprocess.run([...], pass_fds=sandguard.pass_fds())`` under
  ``sandguard -- python ...`` (the variables are inherited already), and with a guard made here
  also ``env=g.child_env()``, which adds ``SANDGUARD_FD``, ``SANDGUARD_SESSION`` and
  ``SANDGUARD_LABELS``. The guard does not put them in ``os.environ`` itself: that would hand
  the session to every child, even those started without the pipe.

The binary is found in this order: ``binary=`` argument, ``$SANDGUARD_BIN``, the ``sandguard``
installed with this module (the environment's scripts directory), ``sandguard`` on ``PATH``.

The module has no dependencies and needs Linux (``/proc``).
"""

from __future__ import annotations

import atexit
import os
import re
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import threading
import time
from typing import Dict, List, Mapping, Optional, Tuple

__all__ = [
    "Guard",
    "SandguardError",
    "guard",
    "start",
    "owner_label",
    "find_binary",
    "pass_fds",
    "child_env",
    "LABEL_SESSION",
    "LABEL_OWNER",
]

#: The label carrying the session id.
LABEL_SESSION = "sandguard.session"
#: The label carrying the owner's identity (``<machine16>-<boot16>-<pid>-<start>``).
LABEL_OWNER = "sandguard.owner"

#: How long to wait for the sidecar's ``ready`` line.
READY_TIMEOUT = 10.0
#: How often a heartbeat is sent.
RENEW_EVERY = 5.0
#: How long ``close()`` waits for the sidecar to finish reclaiming, by default.
WAIT_TIMEOUT = 30.0

# The control protocol's limits (src/protocol.rs).
_MAX_ID = 512
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}\Z")
_UNKNOWN_MACHINE = "0000000000000000"


class SandguardError(RuntimeError):
    """The sidecar could not be started, or is gone."""


#: What a write into a control pipe without a reader raises (the Rust CLI says the same).
_GONE = "the session's sidecar is gone; nothing was recorded"


# --- identity (mirrors src/identity.rs) -------------------------------------------------


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


def owner_label(pid: Optional[int] = None) -> str:
    """The ``sandguard.owner`` label of a process (default: this one), exactly as the sidecar
    computes it: ``<machine16>-<boot16>-<pid>-<start>-<pidns>``, where ``pidns`` is the pid
    namespace the pid is numbered in (a sweep in another namespace judges it "unknown")."""
    pid = os.getpid() if pid is None else pid
    base = f"{_machine()}-{_boot()}-{pid}-{_start_time(pid)}"
    ns = _pid_namespace()
    return base if ns is None else f"{base}-{ns}"


# --- the binary ---------------------------------------------------------------------------


def find_binary() -> str:
    """The ``sandguard`` executable: ``$SANDGUARD_BIN``, else the one installed with this
    module (the environment's scripts directory), else the one on ``PATH``."""
    env = os.environ.get("SANDGUARD_BIN")
    if env:
        return env
    candidates = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(os.path.join(scripts, "sandguard"))
    # A venv whose scripts path is not the interpreter's directory (or a --user install).
    candidates.append(os.path.join(os.path.dirname(sys.executable), "sandguard"))
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("sandguard")
    if found:
        return found
    raise SandguardError(
        "cannot find the sandguard binary: install the sandguard wheel, put sandguard on "
        "PATH, or set SANDGUARD_BIN"
    )


# --- the guard ----------------------------------------------------------------------------

#: The guards open in this process, the most recent last: :func:`pass_fds` and
#: :func:`child_env` speak for the last one.
_open_guards: List["Guard"] = []
_open_guards_lock = threading.Lock()


def _readable(fd: int, timeout: float) -> bool:
    """Whether `fd` is readable (or at EOF) within `timeout` seconds. poll, not select: a
    program with many files open has descriptors above FD_SETSIZE."""
    p = select.poll()
    p.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(p.poll(max(0, int(timeout * 1000) + 1)))


def _write_without_sigpipe(fd: int, data: bytes) -> None:
    """One ``os.write`` that never raises ``SIGPIPE`` in this process, whatever its SIGPIPE
    disposition: a pipe without a reader is ``BrokenPipeError``, nothing else.

    Python ignores SIGPIPE by default, but a program may have set ``SIG_DFL`` (to die quietly
    in a shell pipeline, say). SIGPIPE is blocked in this thread for the write (the kernel
    sends it to the writing thread); if the write failed with EPIPE, the SIGPIPE it raised is
    taken off the pending set (``sigtimedwait`` with a zero timeout) before the old mask comes
    back. A SIGPIPE already pending before the call is left alone. Mirrors
    ``write_without_sigpipe`` in src/unix.rs.
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


def _target(provider: str, sandbox_id: str) -> str:
    """``PROVIDER ID``, checked as the sidecar's parser checks it (src/protocol.rs)."""
    if not isinstance(provider, str) or not _PROVIDER.match(provider):
        raise ValueError(
            f"invalid provider name {provider!r}: expected [a-z0-9][a-z0-9_-]{{0,31}}"
        )
    if (
        not isinstance(sandbox_id, str)
        or not 1 <= len(sandbox_id) <= _MAX_ID
        or not all("!" <= c <= "~" for c in sandbox_id)
    ):
        raise ValueError(
            f"invalid sandbox id {sandbox_id!r:.80}: expected 1 to {_MAX_ID} characters of "
            "printable ASCII"
        )
    return f"{provider} {sandbox_id}"


class Guard:
    """A running sidecar guarding this process. Made by :func:`guard` or :func:`start`.

    Attributes:
        session: the session id (32 hex digits).
        labels: the labels to stamp on every sandbox created under the session
            (``sandguard.session`` and ``sandguard.owner``); a fresh dict each time.
        pid: the guarded process (the one that made the guard).
    """

    def __init__(
        self,
        *,
        binary: Optional[str] = None,
        config: Optional[str] = None,
        grace: Optional[str] = None,
        renew_every: Optional[float] = RENEW_EVERY,
        wait: Optional[float] = WAIT_TIMEOUT,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.pid = os.getpid()
        self._owner = owner_label(self.pid)
        self.session = secrets.token_hex(16)
        self._wait = wait
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._renewer: Optional[threading.Thread] = None
        self._control: Optional[int] = None
        self._stdout: Optional[int] = None
        self._start(binary or find_binary(), config, grace, ready_timeout)
        with _open_guards_lock:
            _open_guards.append(self)
        if renew_every:
            self._renewer = threading.Thread(
                target=self._renew_loop,
                args=(float(renew_every),),
                name="sandguard-renew",
                daemon=True,
            )
            self._renewer.start()

    # -- start-up

    def _start(
        self, binary: str, config: Optional[str], grace: Optional[str], timeout: float
    ) -> None:
        start = self._owner.split("-")[3]
        argv = [binary]
        if config is not None:
            argv += ["--config", str(config)]
        argv += ["watch", "--daemonize", "--session", self.session]
        argv += ["--owner-pid", str(self.pid), "--owner-start", start]
        control_r, control_w = os.pipe()  # both ends close-on-exec
        ready_r, ready_w = os.pipe()
        argv += ["--control-fd", str(control_r)]
        if grace is not None:
            argv += ["--grace", str(grace)]
        try:
            # Its own session: a Ctrl-C or hang-up to our process group does not reach it.
            # `--daemonize` forks once more, so the sidecar is nobody's child (no zombie, no
            # SIGCHLD for this program) and logs to the state directory.
            first = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=ready_w,
                stderr=subprocess.DEVNULL,
                pass_fds=(control_r,),
                start_new_session=True,
                close_fds=True,
            )
        except OSError as e:
            for fd in (control_r, control_w, ready_r, ready_w):
                os.close(fd)
            raise SandguardError(f"cannot start the sidecar {binary}: {e}") from e
        os.close(ready_w)  # EOF on ready_r now means the sidecar is gone
        os.close(control_r)
        try:
            first.wait(timeout)
        except subprocess.TimeoutExpired:
            pass  # read_ready's own deadline decides
        try:
            line = self._read_ready(ready_r, timeout)
        except BaseException:
            os.close(ready_r)
            os.close(control_w)
            raise
        if line != f"ready {self.session}":
            os.close(ready_r)
            os.close(control_w)
            if line.startswith("error "):
                raise SandguardError(f"the sidecar failed to start: {line[6:]}")
            if not line:
                raise SandguardError("the sidecar exited before it was ready")
            raise SandguardError(f"unexpected answer from the sidecar: {line!r:.200}")
        self._control = control_w
        self._stdout = ready_r  # stays open: EOF on it means the sidecar has finished

    @staticmethod
    def _read_ready(fd: int, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        buf = b""
        while b"\n" not in buf and len(buf) <= 4096:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandguardError(f"the sidecar was not ready within {timeout:g} s")
            if not _readable(fd, left):
                continue
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
        return buf.decode("utf-8", "replace").split("\n", 1)[0].strip()

    # -- what the owner says

    @property
    def labels(self) -> Dict[str, str]:
        """The labels to stamp on every sandbox: ``{"sandguard.owner": ..., "sandguard.session": ...}``."""
        return {LABEL_OWNER: self._owner, LABEL_SESSION: self.session}

    def label_args(self, flag: str = "--label") -> List[str]:
        """The labels as Docker CLI arguments: ``["--label", "k=v", ...]``."""
        out: List[str] = []
        for k, v in sorted(self.labels.items()):
            out += [flag, f"{k}={v}"]
        return out

    @property
    def labels_env(self) -> str:
        """The labels as ``SANDGUARD_LABELS`` carries them: ``k=v,k=v``."""
        return ",".join(f"{k}={v}" for k, v in sorted(self.labels.items()))

    def claim(self, provider: str, sandbox_id: str) -> None:
        """Tell the sidecar this sandbox is ours (for sandboxes that carry no labels)."""
        self._send(f"claim {_target(provider, sandbox_id)}\n")

    def release(self, provider: str, sandbox_id: str) -> None:
        """We removed this sandbox ourselves; the sidecar forgets it."""
        self._send(f"release {_target(provider, sandbox_id)}\n")

    def detach(self, provider: str, sandbox_id: str) -> None:
        """This sandbox should outlive us (its TTL still applies)."""
        self._send(f"detach {_target(provider, sandbox_id)}\n")

    def renew(self) -> None:
        """A heartbeat (sent every 5 s by a daemon thread unless ``renew_every=None``)."""
        self._send("renew\n")

    # -- child processes

    def pass_fds(self) -> Tuple[int, ...]:
        """The descriptors a child process needs to talk to this guard's sidecar (the control
        pipe's write end), for :mod:`subprocess`'s ``pass_fds=``. Use with :meth:`child_env`::

            subprocess.run(["sandguard", "claim", "docker", cid],
                           pass_fds=g.pass_fds(), env=g.child_env(), check=True)
        """
        with self._lock:
            if self._closed or self._control is None:
                raise SandguardError("the guard is closed")
            if os.getpid() != self.pid:
                raise SandguardError("only the guarded process can talk to its sidecar")
            return (self._control,)

    def child_env(self, base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """``base`` (default ``os.environ``) plus this session's ``SANDGUARD_FD``,
        ``SANDGUARD_SESSION`` and ``SANDGUARD_LABELS``: the environment of a child that runs
        ``sandguard claim`` (pass :meth:`pass_fds` too)."""
        (fd,) = self.pass_fds()
        env = dict(os.environ if base is None else base)
        env.update(
            SANDGUARD_FD=str(fd),
            SANDGUARD_SESSION=self.session,
            SANDGUARD_LABELS=self.labels_env,
        )
        return env

    def _send(self, line: str) -> None:
        data = line.encode("ascii")
        with self._lock:
            if self._closed or self._control is None:
                raise SandguardError("the guard is closed")
            if os.getpid() != self.pid:
                raise SandguardError("only the guarded process can talk to its sidecar")
            try:
                # One short write (< PIPE_BUF): atomic, never interleaved with another line.
                _write_without_sigpipe(self._control, data)
            except BrokenPipeError as e:
                raise SandguardError(
                    f"{_GONE} (it was killed, or its session has ended: see "
                    "`sandguard sessions`)"
                ) from e

    def _renew_loop(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.renew()
            except SandguardError:
                return

    # -- the end

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, wait: object = "default") -> None:
        """Say ``bye``: the sidecar reclaims everything still owned now and ends the session
        clean. Then wait (``wait`` seconds; default the guard's, 30 s; ``None``: not at all)
        until it has finished. Idempotent; a no-op in a forked child."""
        timeout = self._wait if wait == "default" else wait
        with self._lock:
            if self._closed:
                return
            if os.getpid() != self.pid:
                return  # a forked child: the guard is its parent's
            self._closed = True
            self._stop.set()
            with _open_guards_lock:
                if self in _open_guards:
                    _open_guards.remove(self)
            control, self._control = self._control, None
            stdout, self._stdout = self._stdout, None
        try:
            if control is not None:
                try:
                    _write_without_sigpipe(control, b"bye\n")
                except OSError:
                    pass  # the sidecar is already gone
                os.close(control)
            if stdout is not None and timeout is not None:
                self._wait_for_exit(stdout, float(timeout))  # type: ignore[arg-type]
        finally:
            if stdout is not None:
                os.close(stdout)
            try:
                atexit.unregister(self.close)
            except Exception:
                pass

    @staticmethod
    def _wait_for_exit(fd: int, timeout: float) -> None:
        """The sidecar holds its stdout (our pipe) until it exits: wait for EOF."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if _readable(fd, left) and not os.read(fd, 4096):
                return

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # An exception leaving the block still says bye: see the module's decisions.
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<sandguard.Guard session={self.session} pid={self.pid} {state}>"


def guard(
    *,
    binary: Optional[str] = None,
    config: Optional[str] = None,
    grace: Optional[str] = None,
    renew_every: Optional[float] = RENEW_EVERY,
    wait: Optional[float] = WAIT_TIMEOUT,
    ready_timeout: float = READY_TIMEOUT,
) -> Guard:
    """Start a sidecar guarding this process; use as ``with sandguard.guard() as g:``.

    Args:
        binary: the sandguard executable (default: :func:`find_binary`).
        config: a config file (``--config``); default: sandguard's own lookup.
        grace: the lease grace, e.g. ``"10m"`` (``--grace``).
        renew_every: seconds between heartbeats; ``None`` sends none (no lease).
        wait: how long ``close()`` waits for the reclaim to finish; ``None``: no wait.
        ready_timeout: how long to wait for the sidecar to be ready.

    Raises:
        SandguardError: the sidecar could not be started or did not become ready.
    """
    return Guard(
        binary=binary,
        config=config,
        grace=grace,
        renew_every=renew_every,
        wait=wait,
        ready_timeout=ready_timeout,
    )


def _current_guard() -> Optional[Guard]:
    """The most recent guard this very process made and has not closed."""
    with _open_guards_lock:
        for g in reversed(_open_guards):
            if not g.closed and g.pid == os.getpid():
                return g
    return None


def _inherited_fd() -> Optional[int]:
    """``$SANDGUARD_FD`` when it names an open pipe (``sandguard -- python ...``)."""
    try:
        fd = int(os.environ.get("SANDGUARD_FD", ""))
        return fd if fd >= 0 and stat.S_ISFIFO(os.fstat(fd).st_mode) else None
    except (ValueError, OSError):
        return None


def pass_fds() -> Tuple[int, ...]:
    """The descriptors a child process needs for ``sandguard claim`` (and ``release``,
    ``detach``): :mod:`subprocess` closes all others (``close_fds=True`` is its default)::

        subprocess.run(["sandguard", "claim", "docker", cid], pass_fds=sandguard.pass_fds())

    The session's control pipe comes from the guard this process opened last (then pass
    ``env=sandguard.child_env()`` too, so the child finds it), else from ``$SANDGUARD_FD`` when
    the program runs under ``sandguard -- python ...`` (the child inherits the variables).
    Outside any session it is empty, so the same call works guarded or not.
    """
    g = _current_guard()
    if g is not None:
        return g.pass_fds()
    fd = _inherited_fd()
    return () if fd is None else (fd,)


def child_env(base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment for a child that talks to the session (pair it with :func:`pass_fds`):
    ``base`` (default ``os.environ``) plus the open guard's ``SANDGUARD_*`` variables; under
    ``sandguard -- python ...`` without a guard, ``base`` as it is (it has them already)."""
    g = _current_guard()
    if g is not None:
        return g.child_env(base)
    return dict(os.environ if base is None else base)


def start(**kwargs) -> Guard:
    """Like :func:`guard`, for code that cannot use a ``with`` block: the guard's ``close()``
    (``bye``) is registered with :mod:`atexit`, and may also be called earlier."""
    g = guard(**kwargs)
    atexit.register(g.close)
    return g
