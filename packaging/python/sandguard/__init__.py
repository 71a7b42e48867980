"""Guard this Python process with sandguard: its sandboxes are reclaimed when it dies.

::

    import subprocess, sandguard

    with sandguard.guard() as g:
        # Stamp the session's labels on everything you create...
        subprocess.run(["docker", "run", "-d", *g.label_args(), "busybox", "sleep", "600"])
        # ...or claim what cannot carry labels.
        g.claim("e2b", sandbox_id)
        # A child process claims too, given the pipe (subprocess closes it otherwise);
        # find_binary() is the wheel's own sandguard, also when its venv is not on PATH:
        subprocess.run([sandguard.find_binary(), "claim", "docker", cid],
                       pass_fds=sandguard.pass_fds())

``guard()`` starts ``sandguard watch`` as a sidecar for the current process (in its own
session, so a Ctrl-C to the terminal does not reach it), connected by a pipe, and waits until
it is ready (its session is on disk, its lock held). From then on, however this process ends
(``SIGKILL``, OOM, a crash, a plain exit), the sidecar reclaims every sandbox that carries the
session's labels, and every sandbox claimed. Leaving the ``with`` block (or ``close()``) says
``bye``: the sidecar reclaims what is still owned now, tells how it went (``ended clean``, or
``ended left N: ...``) and ends the session.

Decisions:

- An exception leaving the ``with`` block also says ``bye``: from Python's point of view the
  program is ending in an orderly way, and whatever it still owns should go now rather than
  when the process exits. To keep a sandbox beyond the block, ``detach()`` it (its TTL, if
  any, still applies).
- ``close()`` waits (by default at most 30 s) for the sidecar's word on the reclaim of what
  was still owned, so that after the block the sandboxes are gone, and returns it as an
  :class:`Outcome`. It does not wait for the sidecar's settle pass (a second listing, for
  creates that were in flight): the sidecar runs it after the program has gone, and what it
  finds is reclaimed and journaled, not reported. With nothing in flight a clean exit costs
  the program one listing per provider. ``guard(wait=None)`` does not wait.
- **Something left is reported, not raised**, by default: ``close()`` returns an
  :class:`Outcome` whose ``left`` names each sandbox that could not be removed (and each
  provider that could not be listed), and logs a WARNING on the ``sandguard`` logger. The
  session stays pending and ``sandguard sweep`` retries, so the program's own result (its exit
  status, the exception leaving the block) is not replaced by a cleanup error. ``guard(strict=
  True)`` raises :class:`ReclaimIncomplete` from ``close()`` instead (from ``__exit__`` only
  when no exception is already leaving the block: that one wins).
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
- **The session is exported to the process and its children**, as the wrapper
  (``sandguard -- python ...``) does: while the guard is open, ``os.environ`` holds
  ``SANDGUARD_SESSION``, ``SANDGUARD_LABELS``, ``SANDGUARD_FD``, ``SANDGUARD_CONFIG`` (when
  ``config=`` was given, as an absolute path) and every ``NAME=VALUE`` of the sidecar's ready
  line (``DOCKER_HOST`` with ``docker_proxy=True``, the cloud API URLs with
  ``cloud_proxy=True``). ``close()`` puts back what each variable was before the guard
  (removing the ones that were unset), except a variable the program changed meanwhile:
  its value is the program's. The control pipe is left open across ``exec`` (as the
  wrapper leaves it), so ``os.system`` and ``close_fds=False`` children can claim; but
  :mod:`subprocess` closes every descriptor but 0, 1 and 2 by default, so a child started
  with it needs ``pass_fds=sandguard.pass_fds()`` (one call, guarded or not). A child
  without the pipe has the variables but cannot claim: ``sandguard claim`` says so (exit 2),
  nothing is written anywhere else.

The binary is found in this order: ``binary=`` argument, ``$SANDGUARD_BIN``, the ``sandguard``
installed with this module (the environment's scripts directory), ``sandguard`` on ``PATH``.

``sandguard.__version__`` is the installed wheel's version, which maturin takes from
Cargo.toml: the same as ``sandguard --version`` says.

The module has no dependencies and needs Linux (``/proc``).
"""

from __future__ import annotations

import atexit
import logging
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
from typing import Dict, List, Mapping, NamedTuple, Optional, Tuple

__all__ = [
    "Guard",
    "Outcome",
    "Left",
    "SandguardError",
    "ReclaimIncomplete",
    "claim",
    "release",
    "detach",
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

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# The control protocol's limits (src/protocol.rs).
_MAX_ID = 512
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}\Z")
_UNKNOWN_MACHINE = "0000000000000000"


def _version() -> str:
    """The wheel's version, which maturin takes from Cargo.toml: the binary's own."""
    try:
        from importlib.metadata import version

        return version("sandguard")
    except Exception:  # not installed as a distribution (a source checkout)
        return "0+unknown"


#: The version of the installed wheel, the same as ``sandguard --version`` says.
__version__ = _version()

_log = logging.getLogger("sandguard")


class SandguardError(RuntimeError):
    """The sidecar could not be started, or is gone."""


class Left(NamedTuple):
    """One thing the reclaim after ``bye`` left behind."""

    provider: str
    #: The sandbox's id, or ``*`` for a provider that could not be listed.
    id: str
    reason: str


class Outcome:
    """How the reclaim after ``bye`` went, as the sidecar said it (``close()`` returns it).

    Attributes:
        state: ``"clean"`` (everything still owned is gone), ``"left"`` (see ``left``), or
            ``"unknown"``: the sidecar said nothing (it was gone already, ``wait=None``, or the
            wait timed out).
        left: what could not be removed, at most 16 named (``count`` counts them all).
        count: how many things were left.
    """

    def __init__(self, state: str, left: Optional[List[Left]] = None, count: int = 0,
                 detail: str = "") -> None:
        self.state = state
        self.left = list(left or [])
        self.count = count
        self.detail = detail

    @property
    def clean(self) -> bool:
        return self.state == "clean"

    @classmethod
    def parse(cls, line: str) -> Optional["Outcome"]:
        """The sidecar's line (src/protocol/outcome.rs); ``None`` when it is not one."""
        line = line.strip()
        if line == "ended clean":
            return cls("clean")
        if not line.startswith("ended left "):
            return None
        count, sep, items = line[len("ended left "):].partition(":")
        if not sep or not count.isdigit():
            return None
        left = []
        for item in filter(None, (i.strip() for i in items.split(";"))):
            who, _, reason = item.partition(" ")
            provider, slash, sid = who.partition("/")
            if not slash:
                return None
            left.append(Left(provider, sid, reason))
        return cls("left", left, int(count))

    def check(self) -> "Outcome":
        """Raise :class:`ReclaimIncomplete` when something was left; else return self."""
        if self.state == "left":
            raise ReclaimIncomplete(self)
        return self

    def __str__(self) -> str:
        if self.state == "left":
            named = "; ".join(f"{l.provider}/{l.id} {l.reason}" for l in self.left)
            return f"left {self.count}: {named}"
        return self.state + (f" ({self.detail})" if self.detail else "")

    def __repr__(self) -> str:
        return f"<sandguard.Outcome {self}>"


class ReclaimIncomplete(SandguardError):
    """The reclaim after ``bye`` left something behind (``guard(strict=True)``, or
    :meth:`Outcome.check`). ``.outcome`` says what; ``sandguard sweep`` retries."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__(f"the reclaim after bye left something behind: {outcome}")
        self.outcome = outcome


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
    module (the environment's scripts directory), else the one on ``PATH``.

    Use it to run the CLI from Python (``[sandguard.find_binary(), "claim", ...]``): the
    wheel's binary is in the venv's ``bin``, which is on ``PATH`` only while the venv is
    activated; a venv's python called by its path finds it here all the same."""
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


def _read_line(fd: int, timeout: float) -> Optional[str]:
    """One line from the sidecar's stdout (without its newline; ``""`` at EOF), or ``None``
    when none came within `timeout` seconds. Reads one byte at a time past the first
    ``poll``: nothing after the line may be taken from the pipe."""
    deadline = time.monotonic() + timeout
    buf = b""
    while not buf.endswith(b"\n") and len(buf) <= 4096:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        if not _readable(fd, left):
            continue
        chunk = os.read(fd, 1)
        if not chunk:
            break
        buf += chunk
    return buf.decode("utf-8", "replace").split("\n", 1)[0].strip()


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


def _parse_ready(line: str, session: str) -> Dict[str, str]:
    """The variables of a ``ready SESSION [NAME=VALUE ...]`` line for this session (a third
    word without ``=`` is the older form of ``DOCKER_HOST``). Raises :class:`SandguardError`
    for anything else."""
    words = line.split()
    if words[:1] == ["error"]:
        raise SandguardError(f"the sidecar failed to start: {line[6:]}")
    if not words:
        raise SandguardError("the sidecar exited before it was ready")
    if words[0] != "ready" or len(words) < 2:
        raise SandguardError(f"unexpected answer from the sidecar: {line!r:.200}")
    if words[1] != session:
        raise SandguardError(
            f"the sidecar answered for session {words[1]!r:.80}, not {session!r}")
    env: Dict[str, str] = {}
    for i, word in enumerate(words[2:]):
        name, eq, value = word.partition("=")
        if not eq and i == 0:
            name, value = "DOCKER_HOST", word
        elif not eq or not _ENV_NAME.match(name):
            raise SandguardError(f"unexpected word in the sidecar's ready line: {word!r:.200}")
        env[name] = value
    return env


class Guard:
    """A running sidecar guarding this process. Made by :func:`guard` or :func:`start`.

    Attributes:
        session: the session id (32 hex digits).
        labels: the labels to stamp on every sandbox created under the session
            (``sandguard.session`` and ``sandguard.owner``); a fresh dict each time.
        pid: the guarded process (the one that made the guard).
        env: the variables the guard exported to ``os.environ`` (a fresh dict each time).
        outcome: what ``close()`` returned (``None`` while open).
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
        docker_proxy: bool = False,
        cloud_proxy: bool = False,
        strict: bool = False,
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
        self._strict = strict
        self.outcome: Optional[Outcome] = None
        self._env: Dict[str, str] = {}
        self._saved: Dict[str, Optional[str]] = {}
        flags = ["--docker-proxy"] * bool(docker_proxy) + ["--cloud-proxy"] * bool(cloud_proxy)
        self._binary = binary or find_binary()
        ready = self._start(self._binary, config, grace, ready_timeout, flags)
        self._export(ready, config)
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
        self,
        binary: str,
        config: Optional[str],
        grace: Optional[str],
        timeout: float,
        flags: List[str],
    ) -> Dict[str, str]:
        """Starts the sidecar; returns the variables of its ready line."""
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
        argv += flags
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
        try:
            ready = _parse_ready(line, self.session)
        except SandguardError:
            os.close(ready_r)
            os.close(control_w)
            raise
        self._control = control_w
        self._stdout = ready_r  # stays open: the outcome of `bye` comes on it
        return ready

    def _export(self, ready: Mapping[str, str], config: Optional[str]) -> None:
        """Puts the session into ``os.environ`` (see the module's decisions)."""
        assert self._control is not None
        os.set_inheritable(self._control, True)  # as the wrapper leaves it across exec
        env = {
            "SANDGUARD_SESSION": self.session,
            "SANDGUARD_LABELS": self.labels_env,
            "SANDGUARD_FD": str(self._control),
        }
        if config is not None:
            env["SANDGUARD_CONFIG"] = os.path.abspath(str(config))
        env.update(ready)
        self._saved = {k: os.environ.get(k) for k in env}
        self._env = env
        os.environ.update(env)

    def _restore_env(self) -> None:
        for name, value in self._env.items():
            if os.environ.get(name) != value:
                continue  # the program changed it meanwhile: its value is the program's
            old = self._saved.get(name)
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old

    @property
    def env(self) -> Dict[str, str]:
        """The variables this guard exported (``SANDGUARD_*`` and the ready line's)."""
        return dict(self._env)

    @staticmethod
    def _read_ready(fd: int, timeout: float) -> str:
        line = _read_line(fd, timeout)
        if line is None:
            raise SandguardError(f"the sidecar was not ready within {timeout:g} s")
        return line

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
        """Tell the sidecar this sandbox is ours (for sandboxes that carry no labels).

        Returns once the sidecar has journaled it: this runs ``sandguard claim``, the one
        confirmed path every helper shares, so a refusal (a provider the sidecar has not
        configured, an id it can never name) raises :class:`SandguardError` with its reason.
        A child process claims through the same pipe when :mod:`subprocess` is told to keep
        it open (it inherits the variables from ``os.environ``)::

            subprocess.run([sandguard.find_binary(), "claim", "docker", cid],
                           pass_fds=sandguard.pass_fds())
        """
        self._confirmed("claim", provider, sandbox_id)

    def release(self, provider: str, sandbox_id: str) -> None:
        """We removed this sandbox ourselves; the sidecar forgets it (confirmed)."""
        self._confirmed("release", provider, sandbox_id)

    def detach(self, provider: str, sandbox_id: str) -> None:
        """This sandbox should outlive us (its TTL still applies; confirmed). A sandbox the
        session never owned raises :class:`SandguardError`."""
        self._confirmed("detach", provider, sandbox_id)

    def _confirmed(self, verb: str, provider: str, sandbox_id: str) -> None:
        _target(provider, sandbox_id)  # bad words raise ValueError before anything runs
        with self._lock:
            if self._closed or self._control is None:
                raise SandguardError("the guard is closed")
            if os.getpid() != self.pid:
                raise SandguardError("only the guarded process can talk to its sidecar")
            fd = self._control
        env = dict(os.environ)
        env.update(self._env)
        _run_cli(self._binary, verb, provider, sandbox_id, fd, env)

    def renew(self) -> None:
        """A heartbeat (sent every 5 s by a daemon thread unless ``renew_every=None``)."""
        self._send("renew\n")

    # -- child processes

    def pass_fds(self) -> Tuple[int, ...]:
        """The descriptors a child process needs to talk to this guard's sidecar (the control
        pipe's write end), for :mod:`subprocess`'s ``pass_fds=``. Use with :meth:`child_env`::

            subprocess.run([sandguard.find_binary(), "claim", "docker", cid],
                           pass_fds=g.pass_fds(), env=g.child_env(), check=True)
        """
        with self._lock:
            if self._closed or self._control is None:
                raise SandguardError("the guard is closed")
            if os.getpid() != self.pid:
                raise SandguardError("only the guarded process can talk to its sidecar")
            return (self._control,)

    def child_env(self, base: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """``base`` (default ``os.environ``) plus the variables this guard exports
        (:attr:`env`). ``os.environ`` has them already while the guard is open: this is for
        a child given an environment of its own (pass :meth:`pass_fds` too)."""
        self.pass_fds()  # the same checks: open, and this very process
        env = dict(os.environ if base is None else base)
        env.update(self._env)
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

    def close(self, wait: object = "default") -> Outcome:
        """Say ``bye``: the sidecar reclaims everything still owned now and ends the session.
        Then wait (``wait`` seconds; default the guard's, 30 s; ``None``: not at all) for its
        word on that reclaim, and return it (:class:`Outcome`; also kept as ``.outcome``).
        Something left is logged as a WARNING on the ``sandguard`` logger, and raised as
        :class:`ReclaimIncomplete` with ``guard(strict=True)``. Puts ``os.environ`` back as
        it was (see the module's decisions). Idempotent (a second call returns the same
        outcome); a no-op in a forked child."""
        timeout = self._wait if wait == "default" else wait
        with self._lock:
            if self._closed or os.getpid() != self.pid:
                # Closed already, or a forked child: the guard is its parent's.
                return self.outcome or Outcome("unknown", detail="not the guarded process")
            self._closed = True
            self._stop.set()
            with _open_guards_lock:
                if self in _open_guards:
                    _open_guards.remove(self)
            control, self._control = self._control, None
            stdout, self._stdout = self._stdout, None
        outcome = Outcome("unknown", detail="not waited for")
        try:
            self._restore_env()
            if control is not None:
                try:
                    _write_without_sigpipe(control, b"bye\n")
                except OSError:
                    pass  # the sidecar is already gone: its EOF says so below
                os.close(control)
            if stdout is not None and timeout is not None:
                outcome = self._read_outcome(stdout, float(timeout))  # type: ignore[arg-type]
        finally:
            if stdout is not None:
                os.close(stdout)
            try:
                atexit.unregister(self.close)
            except Exception:
                pass
        self.outcome = outcome
        self._log_outcome(outcome)
        if self._strict:
            outcome.check()
        return outcome

    def _read_outcome(self, fd: int, timeout: float) -> Outcome:
        """The sidecar's line after ``bye`` (it writes nothing else on this pipe after
        ``ready``); EOF without it means the sidecar was gone."""
        try:
            line = _read_line(fd, timeout)
        except OSError as e:
            return self._unknown(f"cannot read the sidecar's answer: {e}")
        if line is None:
            return self._unknown(f"the sidecar said nothing within {timeout:g} s")
        if not line:
            # Gone before bye (killed): the calls that met it said so already.
            return Outcome("unknown", detail="the sidecar was gone")
        parsed = Outcome.parse(line)
        if parsed is None:
            return self._unknown(f"unexpected answer from the sidecar: {line!r:.200}")
        return parsed

    def _unknown(self, why: str) -> Outcome:
        _log.warning("session %s: %s", self.session, why)
        return Outcome("unknown", detail=why)

    def _log_outcome(self, outcome: Outcome) -> None:
        if outcome.state == "left":
            _log.warning("session %s: the reclaim after bye %s (the session is pending; "
                         "`sandguard sweep` retries)", self.session, outcome)

    def __enter__(self) -> "Guard":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # An exception leaving the block still says bye: see the module's decisions. It wins
        # over ReclaimIncomplete (the outcome is logged all the same).
        try:
            self.close()
        except ReclaimIncomplete:
            if exc_type is None:
                raise

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
    docker_proxy: bool = False,
    cloud_proxy: bool = False,
    strict: bool = False,
) -> Guard:
    """Start a sidecar guarding this process; use as ``with sandguard.guard() as g:``.

    Args:
        binary: the sandguard executable (default: :func:`find_binary`).
        config: a config file (``--config``); default: sandguard's own lookup.
        grace: the lease grace, e.g. ``"10m"`` (``--grace``).
        renew_every: seconds between heartbeats; ``None`` sends none (no lease).
        wait: how long ``close()`` waits for the sidecar's word on the reclaim; ``None``: no
            wait.
        ready_timeout: how long to wait for the sidecar to be ready.
        docker_proxy: serve a Docker API proxy that labels and claims what it creates
            (``--docker-proxy``); its address is exported as ``DOCKER_HOST``.
        cloud_proxy: serve the cloud providers' API proxies (``--cloud-proxy``); their
            addresses are exported as the ready line names them (``E2B_API_URL``, ...).
        strict: ``close()`` (and the end of the ``with`` block) raises
            :class:`ReclaimIncomplete` when the reclaim left something.

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
        docker_proxy=docker_proxy,
        cloud_proxy=cloud_proxy,
        strict=strict,
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
    """The descriptors a child process needs to claim (``sandguard claim``, or
    :func:`sandguard.claim` in a Python child): :mod:`subprocess` closes all others
    (``close_fds=True`` is its default)::

        subprocess.run([sandguard.find_binary(), "claim", "docker", cid],
                       pass_fds=sandguard.pass_fds())

    The session's control pipe comes from the guard this process opened last, else from
    ``$SANDGUARD_FD`` (``sandguard -- python ...``, or a parent's guard). The child inherits
    the variables from ``os.environ`` in both cases. Outside any session it is empty, so the
    same call works guarded or not.
    """
    g = _current_guard()
    if g is not None:
        return g.pass_fds()
    fd = _inherited_fd()
    return () if fd is None else (fd,)


def _run_cli(binary: str, verb: str, provider: str, sandbox_id: str, fd: int,
             env: Dict[str, str]) -> None:
    """``sandguard VERB PROVIDER ID`` on the pipe ``fd``: confirmed, as the CLI confirms it
    (the sidecar's answer read from the session's journal); its error raised."""
    env = dict(env, SANDGUARD_FD=str(fd))
    try:
        out = subprocess.run([binary, verb, provider, sandbox_id], env=env, pass_fds=(fd,),
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    except OSError as e:
        raise SandguardError(f"cannot run {binary}: {e}") from e
    if out.returncode != 0:
        said = out.stderr.strip().splitlines()
        message = said[-1] if said else f"sandguard {verb} exited {out.returncode}"
        if message.startswith("sandguard: "):
            message = message[len("sandguard: "):]
        raise SandguardError(message)


def _send(verb: str, provider: str, sandbox_id: str) -> None:
    g = _current_guard()
    if g is not None:
        g._confirmed(verb, provider, sandbox_id)
        return
    _target(provider, sandbox_id)
    fd = _inherited_fd()
    if fd is None:
        raise SandguardError(
            "not in a sandguard session: no guard is open in this process and $SANDGUARD_FD "
            "names no open pipe (a child started by subprocess needs "
            "pass_fds=sandguard.pass_fds())"
        )
    _run_cli(find_binary(), verb, provider, sandbox_id, fd, dict(os.environ))


def claim(provider: str, sandbox_id: str) -> None:
    """Claim a sandbox for the current session: the guard this process opened last, else the
    session in ``$SANDGUARD_FD`` (a child given ``pass_fds=sandguard.pass_fds()``, or a program
    under ``sandguard -- python ...``). Raises :class:`SandguardError` outside a session."""
    _send("claim", provider, sandbox_id)


def release(provider: str, sandbox_id: str) -> None:
    """:func:`claim`'s counterpart for a sandbox removed by the program itself."""
    _send("release", provider, sandbox_id)


def detach(provider: str, sandbox_id: str) -> None:
    """Keep a sandbox beyond the session (its TTL still applies); see :func:`claim`."""
    _send("detach", provider, sandbox_id)


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
