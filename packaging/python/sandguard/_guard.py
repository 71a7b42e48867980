"""The guard object: :class:`Guard` (made by :func:`guard` or :func:`start`), one running
sidecar guarding this process, from its start to its ``bye``.

It holds what the owner says to its sidecar (claims through :mod:`sandguard._control`,
heartbeats from a daemon thread), what it exported to ``os.environ`` (put back on close),
and the end: ``bye``, the sidecar's word on the reclaim read back as an :class:`Outcome`,
logged, and raised under ``strict=True``. The decisions are the package's (``sandguard``'s
module docs).
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import threading
from typing import Dict, List, Mapping, Optional, Tuple

from ._control import GONE, open_guards, register, run_cli, target, unregister
from ._binary import find_binary
from ._identity import LABEL_OWNER, LABEL_SESSION, owner_label
from ._outcome import Outcome, ReclaimIncomplete, SandguardError
from ._pipe import read_line, write_without_sigpipe
from ._sidecar import READY_TIMEOUT, spawn

#: How often a heartbeat is sent.
RENEW_EVERY = 5.0
#: How long ``close()`` waits for the sidecar to finish reclaiming, by default.
WAIT_TIMEOUT = 30.0

_log = logging.getLogger("sandguard")

#: What each variable a guard exports was before the first open guard exported it.
_baseline: Dict[str, Optional[str]] = {}
_baseline_lock = threading.Lock()


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
        max_sandboxes: Optional[int] = None,
        max_creates: Optional[int] = None,
        max_lifetime: Optional[str] = None,
        max_spend: Optional[str] = None,
        on_spend: Optional[str] = None,
    ) -> None:
        self.pid = os.getpid()
        self._binary = binary or find_binary()
        self._owner = owner_label(self.pid, self._binary)
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
        flags = ["--docker-proxy"] * bool(docker_proxy) + ["--cloud-proxy"] * bool(cloud_proxy)
        for flag, limit in (("--max-sandboxes", max_sandboxes), ("--max-creates", max_creates)):
            if limit is not None:
                flags += [flag, str(int(limit))]
        for flag, value in (("--max-lifetime", max_lifetime), ("--max-spend", max_spend),
                            ("--on-spend", on_spend)):
            if value is not None:
                flags += [flag, str(value)]
        self._control, self._stdout, ready = spawn(
            self._binary, self.session, self.pid, self._owner, config, grace, ready_timeout,
            flags,
        )
        self._export(ready, config)
        register(self)
        if renew_every:
            self._renewer = threading.Thread(
                target=self._renew_loop,
                args=(float(renew_every),),
                name="sandguard-renew",
                daemon=True,
            )
            self._renewer.start()

    # -- the environment

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
        with _baseline_lock:
            for k in env:
                _baseline.setdefault(k, os.environ.get(k))
        self._env = env
        os.environ.update(env)

    def _restore_env(self) -> None:
        """Puts back what this guard exported (it is unregistered already): a variable the
        program changed meanwhile keeps its value; one another open guard also exports takes
        the most recent such guard's value, so guards closed out of order never leave a
        closed session's variables behind; the rest get what they were before the first
        guard that exported them."""
        with _baseline_lock:
            still_open = open_guards()
            for name, value in self._env.items():
                still = next((g for g in reversed(still_open) if name in g._env), None)
                if os.environ.get(name) == value:
                    old = still._env[name] if still is not None else _baseline.get(name)
                    if old is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = old
                if still is None:
                    _baseline.pop(name, None)

    @property
    def env(self) -> Dict[str, str]:
        """The variables this guard exported (``SANDGUARD_*`` and the ready line's)."""
        return dict(self._env)

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
        target(provider, sandbox_id)  # bad words raise ValueError before anything runs
        with self._lock:
            if self._closed or self._control is None:
                raise SandguardError("the guard is closed")
            if os.getpid() != self.pid:
                raise SandguardError("only the guarded process can talk to its sidecar")
            fd = self._control
        env = dict(os.environ)
        env.update(self._env)
        run_cli(self._binary, verb, provider, sandbox_id, fd, env)

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
                write_without_sigpipe(self._control, data)
            except BrokenPipeError as e:
                raise SandguardError(
                    f"{GONE} (it was killed, or its session has ended: see "
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
            unregister(self)
            control, self._control = self._control, None
            stdout, self._stdout = self._stdout, None
        outcome = Outcome("unknown", detail="not waited for")
        try:
            self._restore_env()
            if control is not None:
                try:
                    write_without_sigpipe(control, b"bye\n")
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
            line = read_line(fd, timeout)
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
    max_sandboxes: Optional[int] = None,
    max_creates: Optional[int] = None,
    max_lifetime: Optional[str] = None,
    max_spend: Optional[str] = None,
    on_spend: Optional[str] = None,
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
            (``--docker-proxy``); its address is exported as ``DOCKER_HOST``. The guard
            fails to start when no Docker daemon answers (the proxy would reach nothing).
        cloud_proxy: serve the cloud providers' API proxies (``--cloud-proxy``); their
            addresses are exported as the ready line names them (``E2B_API_URL``, ...).
        strict: ``close()`` (and the end of the ``with`` block) raises
            :class:`ReclaimIncomplete` when the reclaim left something.
        max_sandboxes: at most this many sandboxes alive at once (``--max-sandboxes``); a
            create through the proxies over it fails in the client's own error, whose message
            starts ``sandguard: limit `sandboxes` reached``.
        max_creates: at most this many sandboxes created over the guard's life
            (``--max-creates``).
        max_lifetime: no sandbox older than this, e.g. ``"2h"`` (``--max-lifetime``): at that
            age the guard's own sandbox is removed while this process runs, and the proxies
            stamp the limit into each create (``sandguard.expires``, E2B's timeout).
        max_spend: at most this much spent, sandbox time (``"20h"``) or money at the
            configured prices (``"$5"``) (``--max-spend``): creates past it are refused.
        on_spend: ``"reclaim"`` also removes every sandbox the guard holds at the spend
            limit; ``"refuse"`` (the default) only refuses creates (``--on-spend``).

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
        max_sandboxes=max_sandboxes,
        max_creates=max_creates,
        max_lifetime=max_lifetime,
        max_spend=max_spend,
        on_spend=on_spend,
    )


def start(**kwargs) -> Guard:
    """Like :func:`guard`, for code that cannot use a ``with`` block: the guard's ``close()``
    (``bye``) is registered with :mod:`atexit`, and may also be called earlier."""
    g = guard(**kwargs)
    atexit.register(g.close)
    return g
