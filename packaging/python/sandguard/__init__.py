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

The package has no dependencies; it runs on Linux and macOS (where the owner label is asked of
the binary, ``sandguard identity``, for want of ``/proc``).

The package's modules, one concept each (all private; everything public is re-exported
here, and ``import sandguard`` is the one import a program needs):

- ``_outcome``: :class:`Outcome`, :class:`Left` and the errors;
- ``_identity``: the owner label (mirrors src/identity/mod.rs) and the label names;
- ``_binary``: :func:`find_binary`;
- ``_pipe``: a line read from the sidecar, a write that never raises ``SIGPIPE``;
- ``_sidecar``: starting the sidecar and reading its ``ready`` line;
- ``_control``: claims, releases and detaches through the CLI, and what a child needs
  (:func:`pass_fds`, :func:`child_env`);
- ``_guard``: :class:`Guard`, :func:`guard`, :func:`start`.
"""

from __future__ import annotations

from ._binary import find_binary
from ._control import child_env, claim, detach, pass_fds, release
from ._guard import RENEW_EVERY, WAIT_TIMEOUT, Guard, guard, start
from ._identity import LABEL_OWNER, LABEL_SESSION, owner_label
from ._outcome import Left, Outcome, ReclaimIncomplete, SandguardError
from ._sidecar import READY_TIMEOUT
# The ready line's reader, under the name the one-file module gave it (tests/python reads it).
from ._sidecar import parse_ready as _parse_ready

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

# What is public reads as this module's own (in tracebacks, reprs and documentation), as it
# did when the package was one file.
for _name in __all__:
    _item = globals()[_name]
    if hasattr(_item, "__module__") and not isinstance(_item, str):
        _item.__module__ = __name__
del _name, _item


def _version() -> str:
    """The wheel's version, which maturin takes from Cargo.toml: the binary's own."""
    try:
        from importlib.metadata import version

        return version("sandguard")
    except Exception:  # not installed as a distribution (a source checkout)
        return "0+unknown"


#: The version of the installed wheel, the same as ``sandguard --version`` says.
__version__ = _version()
