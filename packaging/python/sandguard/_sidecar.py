"""Starting the sidecar and reading its ``ready`` line: :func:`spawn`.

The sidecar is ``sandguard watch --daemonize`` for this process, started in its own session
(a Ctrl-C or hang-up to the program's process group does not reach it) and given two pipes:
the control pipe (its read end; the guard keeps the write end) and its stdout, on which it
writes ``ready SESSION [NAME=VALUE ...]`` once its session is on disk and its lock held (or
``error ...``), and later the outcome of ``bye``. The line's grammar is the Rust side's
(src/session/spawn.rs); :func:`parse_ready` is its one reader here.
"""

from __future__ import annotations

import os
import re
import subprocess
from typing import Dict, List, Optional, Tuple

from ._outcome import SandguardError
from ._pipe import read_line

#: How long to wait for the sidecar's ``ready`` line.
READY_TIMEOUT = 10.0

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def spawn(
    binary: str,
    session: str,
    pid: int,
    owner: str,
    config: Optional[str],
    grace: Optional[str],
    timeout: float,
    flags: List[str],
) -> Tuple[int, int, Dict[str, str]]:
    """Starts the sidecar of `session` guarding process `pid` (whose owner label is `owner`)
    and waits for it to be ready. Returns the control pipe's write end, the sidecar's stdout
    (kept open: the outcome of ``bye`` comes on it) and the variables of its ready line.
    Raises :class:`SandguardError` when it cannot start or is not ready within `timeout`;
    every descriptor is closed then."""
    start = owner.split("-")[3]
    argv = [binary]
    if config is not None:
        argv += ["--config", str(config)]
    argv += ["watch", "--daemonize", "--session", session]
    argv += ["--owner-pid", str(pid), "--owner-start", start]
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
        ready = parse_ready(_read_ready(ready_r, timeout), session)
    except BaseException:
        os.close(ready_r)
        os.close(control_w)
        raise
    return control_w, ready_r, ready


def _read_ready(fd: int, timeout: float) -> str:
    line = read_line(fd, timeout)
    if line is None:
        raise SandguardError(f"the sidecar was not ready within {timeout:g} s")
    return line


def parse_ready(line: str, session: str) -> Dict[str, str]:
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
