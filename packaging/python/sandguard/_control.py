"""The control connection seen from outside a :class:`~sandguard.Guard`: claims, releases and
detaches (:func:`claim`, :func:`release`, :func:`detach`), and what a child process needs to
make them (:func:`pass_fds`, :func:`child_env`).

Decisions:

- Every claim, release and detach runs ``sandguard VERB PROVIDER ID`` on the session's
  control pipe (:func:`run_cli`): the CLI confirms it from the session's journal, the one
  confirmed path every helper shares, so this module never writes those lines itself.
- The session is the guard this very process opened last (the registry here:
  :func:`register`, :func:`unregister`), else the pipe named by ``$SANDGUARD_FD`` (a program
  under ``sandguard -- python ...``, or a child given ``pass_fds``).
- Bad words (:func:`target`) raise ``ValueError`` before anything runs, checked as the
  sidecar's parser checks them (src/protocol/mod.rs).
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple

from ._binary import find_binary
from ._outcome import SandguardError

if TYPE_CHECKING:
    from ._guard import Guard

# The control protocol's limits (src/protocol/mod.rs).
_MAX_ID = 512
_PROVIDER = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}\Z")

#: What a write into a control pipe without a reader raises (the Rust CLI says the same).
GONE = "the session's sidecar is gone; nothing was recorded"

#: The guards open in this process, the most recent last: :func:`pass_fds` and
#: :func:`child_env` speak for the last one.
_open_guards: List["Guard"] = []
_open_guards_lock = threading.Lock()


def register(g: "Guard") -> None:
    """`g` is open: the module-level calls speak for it (the last one opened)."""
    with _open_guards_lock:
        _open_guards.append(g)


def open_guards() -> List["Guard"]:
    """The guards open now, the most recent last."""
    with _open_guards_lock:
        return list(_open_guards)


def unregister(g: "Guard") -> None:
    """`g` is closed."""
    with _open_guards_lock:
        if g in _open_guards:
            _open_guards.remove(g)


def target(provider: str, sandbox_id: str) -> str:
    """``PROVIDER ID``, checked as the sidecar's parser checks it (src/protocol/mod.rs)."""
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


def current_guard() -> Optional["Guard"]:
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
    g = current_guard()
    if g is not None:
        return g.pass_fds()
    fd = _inherited_fd()
    return () if fd is None else (fd,)


def run_cli(binary: str, verb: str, provider: str, sandbox_id: str, fd: int,
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
    g = current_guard()
    if g is not None:
        g._confirmed(verb, provider, sandbox_id)
        return
    target(provider, sandbox_id)
    fd = _inherited_fd()
    if fd is None:
        raise SandguardError(
            "not in a sandguard session: no guard is open in this process and $SANDGUARD_FD "
            "names no open pipe (a child started by subprocess needs "
            "pass_fds=sandguard.pass_fds())"
        )
    run_cli(find_binary(), verb, provider, sandbox_id, fd, dict(os.environ))


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
    g = current_guard()
    if g is not None:
        return g.child_env(base)
    return dict(os.environ if base is None else base)
