"""End-to-end tests of the Python helper, installed from the wheel into a fresh venv, against
the real Docker daemon: a guarded Python program creates containers, then dies or exits, and
sandguard reclaims them."""

import json
import os
import signal
import subprocess
import time

import pytest

IMAGE = "sandguard-test/busybox:latest"

# The guarded program. argv: LABELLED CLAIMED THEN [START]
#   LABELLED  containers created with the session's labels
#   CLAIMED   containers created without labels, then claimed
#   THEN      wait (until stdin closes or the test kills it) | exit | raise | exit-start
#             (exit-start: uses sandguard.start() and ends without closing; atexit says bye)
PROGRAM = r'''
import json, os, subprocess, sys, time
import sandguard

labelled, claimed, then = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]

def run(*extra):
    out = subprocess.run(
        ["docker", "run", "-d", "--network", "none", *extra, IMAGE, "sleep", "600"],
        check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout.strip()

IMAGE = "sandguard-test/busybox:latest"
g = sandguard.start() if then == "exit-start" else sandguard.guard()
with (g if then != "exit-start" else open(os.devnull)):
    made = [run(*g.label_args()) for _ in range(labelled)]
    unlabelled = [run() for _ in range(claimed)]
    for cid in unlabelled:
        g.claim("docker", cid)
    print(json.dumps({
        "session": g.session, "labels": g.labels, "pid": os.getpid(),
        "labelled": made, "claimed": unlabelled,
        "binary": sandguard.find_binary(),
    }), flush=True)
    if then == "wait":
        sys.stdin.read()
    elif then == "raise":
        raise RuntimeError("boom")
'''


def start_program(tmp_path, pyenv, env, labelled, claimed, then):
    script = tmp_path / "guarded.py"
    script.write_text(PROGRAM)
    proc = subprocess.Popen(
        [str(pyenv / "bin" / "python"), str(script), str(labelled), str(claimed), then],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"the guarded program printed nothing; stderr:\n{err}")
    return proc, json.loads(line)


def existing(ids):
    """The ones of `ids` that Docker still has (any state)."""
    if not ids:
        return set()
    out = subprocess.run(["docker", "ps", "-aq", "--no-trunc"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout.split()
    return {i for i in ids if i in out}


def labelled_with(session):
    return subprocess.run(
        ["docker", "ps", "-aq", "--no-trunc", "--filter", f"label=sandguard.session={session}"],
        check=True, stdout=subprocess.PIPE, text=True).stdout.split()


def wait_gone(info, within):
    """Seconds until every container of the program is gone; fails after `within`."""
    ids = info["labelled"] + info["claimed"]
    started = time.monotonic()
    while True:
        left = existing(ids) | set(labelled_with(info["session"]))
        took = time.monotonic() - started
        if not left:
            return took
        if took > within:
            pytest.fail(f"still there after {within} s: {sorted(left)}")
        time.sleep(0.1)


def session_state(env, session):
    out = subprocess.run(["sandguard", "sessions", "--json"], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    rows = [r for r in json.loads(out)["sessions"] if r["session"] == session]
    assert len(rows) == 1, out
    return rows[0]["state"]


def ends(env, session, state, within=10):
    """The session's journal reaches `state` within `within` seconds. After `bye` the program
    has its answer at once, but the sidecar journals the end after its settle pass."""
    deadline = time.monotonic() + within
    while (now := session_state(env, session)) != state:
        assert time.monotonic() < deadline, f"session {session} is {now}, not {state}"
        time.sleep(0.05)


@pytest.fixture(autouse=True)
def _cleanup():
    """Whatever a failed test left behind goes, so one failure does not leak containers."""
    before = set(subprocess.run(["docker", "ps", "-aq", "--no-trunc"], check=True,
                                stdout=subprocess.PIPE, text=True).stdout.split())
    yield
    after = set(subprocess.run(["docker", "ps", "-aq", "--no-trunc"], check=True,
                               stdout=subprocess.PIPE, text=True).stdout.split())
    leaked = sorted(after - before)
    if leaked:
        subprocess.run(["docker", "rm", "-f", *leaked], stdout=subprocess.DEVNULL)


def test_sigkill_reclaims_every_container_within_5s(tmp_path, pyenv, env, docker_ready):
    proc, info = start_program(tmp_path, pyenv, env, labelled=3, claimed=1, then="wait")
    assert info["binary"] == str(pyenv / "bin" / "sandguard"), info["binary"]
    assert len(existing(info["labelled"] + info["claimed"])) == 4
    assert sorted(labelled_with(info["session"])) == sorted(info["labelled"])
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    took = wait_gone(info, within=5)
    print(f"reclaimed 4 containers {took:.2f} s after SIGKILL")


def test_a_claimed_unlabelled_container_is_reclaimed(tmp_path, pyenv, env, docker_ready):
    proc, info = start_program(tmp_path, pyenv, env, labelled=0, claimed=2, then="wait")
    assert not labelled_with(info["session"])
    assert existing(info["claimed"]) == set(info["claimed"])
    proc.kill()
    proc.wait()
    wait_gone(info, within=5)


def test_a_clean_exit_from_the_with_block_says_bye_and_reclaims(tmp_path, pyenv, env,
                                                                  docker_ready):
    proc, info = start_program(tmp_path, pyenv, env, labelled=2, claimed=1, then="exit")
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    # close() waited for the reclaim of what was still owned: nothing is left at all.
    assert not existing(info["labelled"] + info["claimed"])
    assert not labelled_with(info["session"])
    ends(env, info["session"], "clean")


def test_an_exception_leaving_the_block_also_says_bye(tmp_path, pyenv, env, docker_ready):
    proc, info = start_program(tmp_path, pyenv, env, labelled=1, claimed=0, then="raise")
    assert proc.wait(timeout=60) == 1
    assert "RuntimeError: boom" in proc.stderr.read()
    assert not existing(info["labelled"])
    ends(env, info["session"], "clean")


def test_start_without_a_with_block_says_bye_at_exit(tmp_path, pyenv, env, docker_ready):
    proc, info = start_program(tmp_path, pyenv, env, labelled=1, claimed=0, then="exit-start")
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert not existing(info["labelled"])
    ends(env, info["session"], "clean")


def test_labels_match_what_ps_reports_while_the_owner_lives(tmp_path, pyenv, env,
                                                            docker_ready):
    proc, info = start_program(tmp_path, pyenv, env, labelled=2, claimed=0, then="wait")
    try:
        out = subprocess.run(["sandguard", "ps", "--json"], env=env, check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        mine = [s for s in json.loads(out)["sandboxes"] if s["session"] == info["session"]]
        assert sorted(s["instance_id"] for s in mine) == sorted(info["labelled"]), out
        for s in mine:
            assert s["owner_alive"] is True, s
            assert s["owner"] == info["labels"]["sandguard.owner"], s
            for k, v in info["labels"].items():
                assert s["labels"][k] == v, s
        machine, boot, pid, start, pidns = info["labels"]["sandguard.owner"].split("-")
        assert int(pid) == info["pid"] == proc.pid
        assert len(machine) == 16 and len(boot) == 16 and start.isdigit()
        assert int(pidns) == os.stat("/proc/self/ns/pid").st_ino
    finally:
        proc.stdin.close()  # the program leaves its with-block: bye
        assert proc.wait(timeout=60) == 0
    assert not existing(info["labelled"])


def test_bad_claims_are_refused_in_python(tmp_path, pyenv, env):
    code = r'''
import sandguard
with sandguard.guard(renew_every=None) as g:
    for provider, sid in [("Docker", "x"), ("docker", "a b"), ("docker", ""),
                          ("docker", "\x1b[2J"), ("docker", "x" * 513), ("-x", "y")]:
        try:
            g.claim(provider, sid)
        except ValueError:
            pass
        else:
            raise SystemExit(f"accepted {provider!r} {sid!r}")
    # Well-formed words reach the sidecar, which judges them; a claim is confirmed, so its
    # refusal comes back as an error (a Docker id is hex; e2b is not configured here).
    for provider, sid in [("docker", "x" * 512), ("e2b", "sbx_1.2:3/4")]:
        try:
            g.claim(provider, sid)
        except sandguard.SandguardError as e:
            assert "refused" in str(e), e
        else:
            raise SystemExit(f"the sidecar accepted {provider!r} {sid!r}")
    g.renew()
assert g.closed
try:
    g.claim("docker", "x")
except sandguard.SandguardError:
    print("ok")
'''
    out = subprocess.run([str(pyenv / "bin" / "python"), "-c", code], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_a_sidecar_that_cannot_start_raises(tmp_path, pyenv, env):
    env = dict(env, SANDGUARD_CONFIG=str(tmp_path / "missing.toml"))
    code = r'''
import sandguard
try:
    sandguard.guard()
except sandguard.SandguardError as e:
    print("refused:", e)
'''
    out = subprocess.run([str(pyenv / "bin" / "python"), "-c", code], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("refused: "), out.stdout


def test_a_forked_child_never_says_bye_for_its_parent(tmp_path, pyenv, env, docker_ready):
    code = r'''
import os, subprocess, sys, sandguard
with sandguard.guard(renew_every=None) as g:
    cid = subprocess.run(
        ["docker", "run", "-d", "--network", "none", *g.label_args(),
         "sandguard-test/busybox:latest", "sleep", "600"],
        check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    child = os.fork()
    if child == 0:
        sys.exit(0)  # leaves the with-block in the child: must not reclaim the parent's
    os.waitpid(child, 0)
    running = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}}", cid],
                             stdout=subprocess.PIPE, text=True).stdout.strip()
    print(cid, running, flush=True)
'''
    out = subprocess.run([str(pyenv / "bin" / "python"), "-c", code], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cid, running = out.stdout.split()
    assert running == "true", out.stdout
    assert not existing([cid])  # the parent's own bye reclaimed it
