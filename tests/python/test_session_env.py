"""Issue #15, points 3 and 5 for the Python helper: the guard exports the session to the
process and its children (and puts the environment back on close), a child process claims
through ``pass_fds=sandguard.pass_fds()``, ``sandguard.__version__`` is the binary's, and
``close()`` returns the sidecar's word on the reclaim: clean, or what was left (logged as a
WARNING; raised as ReclaimIncomplete with ``strict=True``)."""

import json
import os
import signal
import subprocess
import time

IMAGE = "sandguard-test/busybox:latest"


def python(pyenv):
    return str(pyenv / "bin" / "python")


def exists(cid):
    out = subprocess.run(["docker", "ps", "-aq", "--no-trunc"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout.split()
    return cid in out


def session_state(env, session):
    out = subprocess.run(["sandguard", "sessions", "--json"], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    rows = [r for r in json.loads(out)["sessions"] if r["session"] == session]
    return rows[0]["state"] if rows else None


def eventually(what, check, within=10.0):
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_version_is_the_binarys(pyenv, env):
    said = subprocess.run([python(pyenv), "-c", "import sandguard; print(sandguard.__version__)"],
                          env=env, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    binary = subprocess.run(["sandguard", "--version"], env=env, check=True,
                            stdout=subprocess.PIPE, text=True).stdout.split()
    assert binary[0] == "sandguard" and said == binary[1], (said, binary)


# argv: CONFIG. Opens a guard with the Docker proxy, reports os.environ and what a plain
# child sees, closes, reports os.environ again.
EXPORTS = r'''
import json, os, subprocess, sys
import sandguard

NAMES = ["SANDGUARD_SESSION", "SANDGUARD_LABELS", "SANDGUARD_FD", "SANDGUARD_CONFIG",
         "DOCKER_HOST", "TESTCONTAINERS_RYUK_DISABLED"]
def snapshot():
    return {k: os.environ.get(k) for k in NAMES}

os.environ["DOCKER_HOST"] = "unix:///var/run/docker.sock"
before = snapshot()
g = sandguard.guard(docker_proxy=True, config=sys.argv[1], renew_every=None)
during = snapshot()
child = subprocess.run(
    [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"],
    check=True, stdout=subprocess.PIPE, text=True).stdout
os.environ["SANDGUARD_LABELS"] = "changed-by-the-program"
outcome = g.close()
print(json.dumps({"session": g.session, "labels": g.labels_env, "env": g.env, "before": before,
                  "during": during, "child": json.loads(child), "after": snapshot(),
                  "outcome": [outcome.state, outcome.clean, outcome.left]}))
'''


def test_the_guard_exports_the_session_and_puts_the_environment_back(tmp_path, pyenv, env,
                                                                    docker_ready):
    config = tmp_path / "sandguard.toml"
    config.write_text("[reclaim]\nsettle = \"0\"\n")
    script = tmp_path / "exports.py"
    script.write_text(EXPORTS)
    out = subprocess.run([python(pyenv), str(script), os.path.relpath(config, tmp_path)],
                         env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    during, child, after = info["during"], info["child"], info["after"]
    assert during["SANDGUARD_SESSION"] == info["session"]
    assert during["SANDGUARD_LABELS"] == info["labels"]
    assert during["SANDGUARD_FD"].isdigit()
    assert during["SANDGUARD_CONFIG"] == str(config), "an absolute path"
    assert during["DOCKER_HOST"].startswith("unix://") and during["DOCKER_HOST"].endswith(
        "docker.sock") and during["DOCKER_HOST"] != info["before"]["DOCKER_HOST"], during
    assert during["TESTCONTAINERS_RYUK_DISABLED"] == "true", "with the Docker proxy, no Ryuk"
    assert info["env"] == during, "g.env is what was exported"
    for name, value in info["env"].items():
        assert child[name] == value, f"the child inherits {name}"
    # After close(): what was there before, except what the program changed meanwhile.
    assert after["SANDGUARD_SESSION"] is None
    assert after["SANDGUARD_FD"] is None
    assert after["SANDGUARD_CONFIG"] is None
    assert after["DOCKER_HOST"] == "unix:///var/run/docker.sock"
    assert after["TESTCONTAINERS_RYUK_DISABLED"] is None
    assert after["SANDGUARD_LABELS"] == "changed-by-the-program"
    assert info["outcome"] == ["clean", True, []]


# A child Python process (plain subprocess): creates a container without labels and claims
# it with sandguard.claim through the pipe it was given.
CHILD = r'''
import subprocess
import sandguard
cid = subprocess.run(
    ["docker", "run", "-d", "--network", "none", "sandguard-test/busybox:latest", "sleep", "600"],
    check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
sandguard.claim("docker", cid)
print(cid)
'''
# argv: CHILD MODE (guard | wrapper). First a child without the pipe (its claim must fail
# clearly), then one with pass_fds=sandguard.pass_fds(); then waits to be killed.
PARENT = r'''
import subprocess, sys
import sandguard
if sys.argv[2] == "guard":
    g = sandguard.guard()
plain = subprocess.run([sys.executable, "-c", "import sandguard; sandguard.claim('docker', '0' * 64)"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
print("without:", plain.returncode, plain.stderr.strip().splitlines()[-1:], flush=True)
child = subprocess.run([sys.executable, "-c", sys.argv[1]], pass_fds=sandguard.pass_fds(),
                       check=True, stdout=subprocess.PIPE, text=True)
print(child.stdout.strip(), flush=True)
sys.stdin.read()
'''


def test_a_child_process_claims_and_the_parents_death_reclaims_it(tmp_path, pyenv, env,
                                                                   docker_ready):
    for mode in ("guard", "wrapper"):
        argv = [python(pyenv), "-c", PARENT, CHILD, mode]
        if mode == "wrapper":
            argv = ["sandguard", "--", *argv]
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        cid = ""
        try:
            without = proc.stdout.readline()
            assert without.startswith("without: 1 ") and "pass_fds" in without, (
                without, "" if without else proc.stderr.read())
            cid = proc.stdout.readline().strip()
            assert cid, proc.stderr.read()
            assert exists(cid)
            proc.send_signal(signal.SIGKILL)  # the wrapper exec'd Python: this is the owner
            proc.wait(timeout=10)
            eventually(f"{mode}: the child's claimed container outlived its owner",
                       lambda: not exists(cid))
        finally:
            if proc.poll() is None:
                proc.kill()
            if cid and exists(cid):
                subprocess.run(["docker", "rm", "-f", cid], stdout=subprocess.DEVNULL)


# argv: STRICT (yes | no) RAISE (yes | no). The sidecar's Docker is a dead socket: the reclaim
# after bye cannot list it, and says so.
LEFT = r'''
import json, os, sys
import sandguard
os.environ["DOCKER_HOST"] = "unix://" + os.path.abspath("dead.sock")
strict, boom = sys.argv[1] == "yes", sys.argv[2] == "yes"
g = sandguard.guard(strict=strict, renew_every=None)
print(json.dumps({"session": g.session}), flush=True)
try:
    with g:
        if boom:
            raise KeyError("the program's own error")
except sandguard.ReclaimIncomplete as e:
    print(json.dumps({"raised": "ReclaimIncomplete", "count": e.outcome.count}), flush=True)
except KeyError:
    print(json.dumps({"raised": "KeyError"}), flush=True)
o = g.outcome
print(json.dumps({"state": o.state, "clean": o.clean, "count": o.count,
                  "left": [list(l) for l in o.left], "again": g.close().state}), flush=True)
'''


def run_left(tmp_path, pyenv, env, strict, boom):
    config = tmp_path / "sandguard.toml"
    config.write_text("[reclaim]\ndeadline = \"2s\"\nretry_initial = \"50ms\"\nsettle = \"0\"\n")
    out = subprocess.run([python(pyenv), "-c", LEFT, strict, boom],
                         env=dict(env, SANDGUARD_CONFIG=str(config)), cwd=tmp_path,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()], out.stderr


def test_a_reclaim_that_left_something_is_reported_and_logged(tmp_path, pyenv, env):
    lines, err = run_left(tmp_path, pyenv, env, "no", "no")
    session, outcome = lines[0]["session"], lines[-1]
    assert len(lines) == 2, lines
    assert outcome["state"] == "left" and not outcome["clean"] and outcome["count"] == 1, outcome
    [[provider, sid, reason]] = outcome["left"]
    assert (provider, sid) == ("docker", "*") and reason.startswith("not listed: "), outcome
    assert outcome["again"] == "left", "close() is idempotent"
    # No handler configured: logging's last resort prints the WARNING on stderr.
    assert f"session {session}: the reclaim after bye left 1: docker/*" in err, err
    eventually("the session is pending",
               lambda: session_state(dict(env, SANDGUARD_CONFIG=str(tmp_path / "sandguard.toml")),
                                     session) == "pending")


def test_strict_raises_reclaim_incomplete_unless_the_block_raised(tmp_path, pyenv, env):
    lines, _ = run_left(tmp_path, pyenv, env, "yes", "no")
    assert lines[1] == {"raised": "ReclaimIncomplete", "count": 1}, lines
    (tmp_path / "b").mkdir()
    lines, err = run_left(tmp_path / "b", pyenv, env, "yes", "yes")
    assert lines[1] == {"raised": "KeyError"}, "the program's own error wins"
    assert lines[2]["state"] == "left", lines
    assert "left 1: docker/*" in err, "and the outcome is logged all the same"


# The ready and outcome lines as the module reads them, both forms of the ready line (the
# `NAME=VALUE` words come from the sidecar's proxies) and lines it must refuse; run in the
# wheel's interpreter, no sidecar involved.
PARSING = r'''
import sandguard
from sandguard import Outcome, SandguardError, _parse_ready

assert _parse_ready("ready s1", "s1") == {}
assert _parse_ready("ready s1 unix:///run/d.sock", "s1") == {"DOCKER_HOST": "unix:///run/d.sock"}
assert _parse_ready("ready s1 DOCKER_HOST=unix:///d.sock E2B_API_URL=http://127.0.0.1:9/x=y",
                    "s1") == {"DOCKER_HOST": "unix:///d.sock",
                              "E2B_API_URL": "http://127.0.0.1:9/x=y"}
for bad in ["ready s2", "ready s1 a=b unix:///x", "ready s1 1BAD=x", "error boom", "", "hello"]:
    try:
        _parse_ready(bad, "s1")
    except SandguardError:
        pass
    else:
        raise AssertionError(bad)

assert Outcome.parse("ended clean").clean
o = Outcome.parse("ended left 20: docker/3f2a failed: conflict; e2b/* not listed: 503")
assert (o.state, o.count, len(o.left)) == ("left", 20, 2), o
assert o.left[1] == sandguard.Left("e2b", "*", "not listed: 503"), o.left
for bad in ["ended", "ended left x: a/b c", "ended left 1: nobody", "ready s1"]:
    assert Outcome.parse(bad) is None, bad
try:
    o.check()
except sandguard.ReclaimIncomplete as e:
    assert e.outcome is o
else:
    raise AssertionError("check() raises when something was left")
print("ok")
'''


def test_ready_and_outcome_lines_are_read_in_both_forms_and_refused_otherwise(pyenv, env):
    out = subprocess.run([python(pyenv), "-c", PARSING], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert out.stdout.strip() == "ok", out.stderr


TWO_GUARDS = r'''
import json, os
import sandguard
seen = lambda: os.environ.get("SANDGUARD_SESSION")
steps = [seen()]
a = sandguard.guard(renew_every=None)
steps.append(seen())
b = sandguard.guard(renew_every=None)
steps.append(seen())
a.close()
steps.append(seen())
b.close()
steps.append(seen())
print(json.dumps({"a": a.session, "b": b.session, "steps": steps}))
'''


def test_guards_closed_out_of_order_leave_no_closed_session_in_the_environment(tmp_path, pyenv,
                                                                               env):
    script = tmp_path / "two_guards.py"
    script.write_text(TWO_GUARDS)
    out = subprocess.run([python(pyenv), str(script)], env=dict(env, SANDGUARD_SESSION="before"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    # Closing a first leaves b's session; closing b brings back what was there before both
    # (it used to bring back a's, a session already ended).
    assert info["steps"] == ["before", info["a"], info["b"], info["b"], "before"], info
