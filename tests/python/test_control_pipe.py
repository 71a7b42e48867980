"""The control pipe from the owner's side (issue #10, points 12 and 23): a guarded Python
program whose sidecar is gone gets SandguardError and lives on, even with SIGPIPE at its
default disposition; and a child process started with subprocess can claim through the pipe
when it is passed on (``pass_fds``), both under a guard and under ``sandguard -- python``."""

import json
import os
import signal
import subprocess
import time

import pytest

IMAGE = "sandguard-test/busybox:latest"

# argv: python-default | SIG_DFL. Prints its session, waits for a line on stdin (the test kills
# the sidecar meanwhile), lets heartbeats meet the closed pipe, then claims.
SIDECAR_GONE = r'''
import signal, sys, time
import sandguard

if sys.argv[1] == "SIG_DFL":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
with sandguard.guard(renew_every=0.05) as g:
    print(g.session, flush=True)
    sys.stdin.readline()
    time.sleep(0.3)
    try:
        g.claim("docker", "0123456789abcdef")
    except sandguard.SandguardError as e:
        print("refused:", e, flush=True)
    else:
        print("accepted", flush=True)
        sys.exit(3)
print("closed", flush=True)
'''

# argv: guard | wrapper. Creates an unlabelled container, has a child `sandguard claim` it,
# prints what it did, and waits until the test kills it.
CHILD_CLAIMS = r'''
import json, subprocess, sys
import sandguard

def claim(cid, **kwargs):
    return subprocess.run(["sandguard", "claim", "docker", cid], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **kwargs)

cid = subprocess.run(
    ["docker", "run", "-d", "--network", "none", "sandguard-test/busybox:latest", "sleep", "600"],
    check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
print(cid, flush=True)
if sys.argv[1] == "guard":
    g = sandguard.start()
    # What a plain subprocess call does: the pipe is closed in the child.
    without = claim(cid, env=g.child_env())
    done = claim(cid, pass_fds=g.pass_fds(), env=g.child_env())
else:
    without = claim(cid)
    done = claim(cid, pass_fds=sandguard.pass_fds())
print(json.dumps({"without": [without.returncode, without.stderr],
                  "with": [done.returncode, done.stderr]}), flush=True)
sys.stdin.read()
'''


def no_docker_config(tmp_path, env):
    config = tmp_path / "no-docker.toml"
    config.write_text("[providers.docker]\nenabled = false\n")
    return dict(env, SANDGUARD_CONFIG=str(config))


def find_process(needle):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if needle in cmdline:
            return int(entry)
    return None


def dead(pid):
    """Gone, or a zombie: either way its descriptors are closed."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return ") Z " in f.read()
    except OSError:
        return True


def exists(cid):
    out = subprocess.run(["docker", "ps", "-aq", "--no-trunc"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout.split()
    return cid in out


@pytest.mark.parametrize("sigpipe", ["python-default", "SIG_DFL"])
def test_a_dead_sidecar_is_an_error_never_a_sigpipe(tmp_path, pyenv, env, sigpipe):
    script = tmp_path / "gone.py"
    script.write_text(SIDECAR_GONE)
    proc = subprocess.Popen([str(pyenv / "bin" / "python"), str(script), sigpipe],
                            env=no_docker_config(tmp_path, env), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        session = proc.stdout.readline().strip()
        assert session, proc.stderr.read()
        sidecar = find_process(f"--session {session}")
        assert sidecar is not None, "the guard's sidecar runs"
        os.kill(sidecar, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not dead(sidecar):
            assert time.monotonic() < deadline, "the sidecar outlived SIGKILL"
            time.sleep(0.02)
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (
        f"exit {proc.returncode} (-13: killed by SIGPIPE); stdout {out!r}; stderr {err!r}")
    lines = out.splitlines()
    assert len(lines) == 2 and lines[1] == "closed", out
    assert lines[0].startswith("refused: the session's sidecar is gone"), out
    assert err == "", "the heartbeat thread stops quietly"


@pytest.mark.parametrize("mode", ["guard", "wrapper"])
def test_a_child_process_claims_through_pass_fds(tmp_path, pyenv, env, docker_ready, mode):
    script = tmp_path / "child.py"
    script.write_text(CHILD_CLAIMS)
    python = [str(pyenv / "bin" / "python"), str(script), mode]
    argv = python if mode == "guard" else [str(pyenv / "bin" / "sandguard"), "--", *python]
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    cid = None
    try:
        cid = proc.stdout.readline().strip()
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            pytest.fail(f"the program printed nothing; stderr:\n{proc.communicate()[1]}")
        info = json.loads(line)
        # Without pass_fds the child has no pipe: `sandguard claim` refuses (exit 2).
        assert info["without"][0] == 2, info
        assert info["with"] == [0, ""], info
        assert exists(cid)
        proc.send_signal(signal.SIGKILL)  # the wrapper exec'd Python: this is the owner
        proc.wait(timeout=10)
        deadline = time.monotonic() + 5
        while exists(cid):
            assert time.monotonic() < deadline, "the claimed container outlived its owner"
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        if cid and exists(cid):
            subprocess.run(["docker", "rm", "-f", cid], stdout=subprocess.DEVNULL)
