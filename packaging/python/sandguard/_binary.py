"""Finding the ``sandguard`` executable: :func:`find_binary`.

The order is ``$SANDGUARD_BIN``, the binary installed with this module (the wheel puts it in
the environment's scripts directory), then ``sandguard`` on ``PATH``. The scripts directory
comes first because a venv's python called by its path does not have the venv's ``bin`` on
``PATH``; ``guard(binary=...)`` overrides all of them.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

from ._outcome import SandguardError


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
