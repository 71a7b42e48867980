"""Issue #11, point 12, for the Python helper: a sandbox the program detached with
`g.detach(...)` survives the program's SIGKILL and every sweep after it; one whose
`sandguard.expires` has passed is removed by the sweep (its TTL still applies).

The sandboxes live in a shell-script plugin provider (files in a directory) and Docker is
switched off in the config, so the real sweeps here touch nothing on the shared daemon."""

import json
import os
import signal
import subprocess
import time

PLUGIN = r'''#!/bin/sh
state=__STATE__
case "$1" in
list) printf '{"sandboxes":['; sep=''
      for f in "$state"/*.json; do
        # A sandbox removed meanwhile (sandguard removes claims while it lists) is skipped.
        s=$(cat "$f" 2>/dev/null) || continue; printf '%s%s' "$sep" "$s"; sep=','
      done
      printf ']}\n' ;;
remove) id=$(sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
        if rm "$state/$id.json" 2>/dev/null; then echo '{"result":"removed"}'; else echo '{"result":"gone"}'; fi ;;
describe) echo '{"capabilities":{"labels":true,"ttl":false}}' ;;
*) exit 2 ;;
esac
'''

# The guarded program. argv: STATE. Makes three sandboxes carrying the session's labels,
# detaches two of them (one already expired), says so, and waits to be killed.
PROGRAM = r'''
import json, os, sys, time
import sandguard

state = sys.argv[1]

def make(sid, **extra):
    path = os.path.join(state, sid + ".json")
    with open(path + ".tmp", "w") as f:
        json.dump({"id": sid, "status": "running", "labels": dict(g.labels, **extra)}, f)
    os.rename(path + ".tmp", path)

g = sandguard.guard(renew_every=None)
make("plain")
make("kept")
make("expired", **{"sandguard.expires": str(int(time.time()) - 60)})
g.detach("fk", "kept")
g.detach("fk", "expired")
print(json.dumps({"session": g.session}), flush=True)
sys.stdin.read()
'''


def setup(tmp_path, env):
    state = tmp_path / "fk.state"
    state.mkdir()
    plugin = tmp_path / "fk"
    plugin.write_text(PLUGIN.replace("__STATE__", str(state)))
    plugin.chmod(0o755)
    config = tmp_path / "sandguard.toml"
    config.write_text(
        "[providers.docker]\nenabled = false\n\n"
        "[reclaim]\ndeadline = \"5s\"\nretry_initial = \"50ms\"\nsettle = \"0\"\n\n"
        f"[providers.fk]\ncommand = [\"{plugin}\"]\n"
    )
    return state, dict(env, SANDGUARD_CONFIG=str(config))


def sandguard_json(env, *args):
    out = subprocess.run(["sandguard", *args, "--json"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60)
    return out.returncode, json.loads(out.stdout), out.stderr


def session_state(env, session):
    _, v, _ = sandguard_json(env, "sessions")
    rows = [r for r in v["sessions"] if r["session"] == session]
    return rows[0]["state"] if rows else None


def decision(sweep, sid):
    found = [d for d in sweep["decisions"] if d["instance_id"] == sid]
    assert len(found) == 1, sweep
    return found[0]["verdict"], found[0]["reason"]


def test_a_detached_sandbox_survives_sigkill_and_sweeps_until_its_ttl(tmp_path, pyenv, env):
    state, env = setup(tmp_path, env)
    script = tmp_path / "guarded.py"
    script.write_text(PROGRAM)
    proc = subprocess.Popen([str(pyenv / "bin" / "python"), str(script), str(state)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()
        session = json.loads(line)["session"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    exists = lambda sid: (state / f"{sid}.json").exists()  # noqa: E731

    deadline = time.monotonic() + 15
    while exists("plain") or session_state(env, session) != "reclaimed":
        assert time.monotonic() < deadline, (exists("plain"), session_state(env, session))
        time.sleep(0.05)
    assert exists("kept"), "detached: the sidecar leaves it"
    assert exists("expired"), "detached: the sidecar leaves it, expired or not"

    code, sweep, err = sandguard_json(env, "sweep")
    assert code == 0, (sweep, err)
    verdict, reason = decision(sweep, "kept")
    assert verdict == "leave" and "detached by its owner" in reason, sweep
    verdict, reason = decision(sweep, "expired")
    assert verdict == "reclaim" and "sandguard.expires has passed" in reason, sweep
    assert exists("kept")
    assert not exists("expired"), "its TTL ended it"

    code, sweep, err = sandguard_json(env, "sweep")
    assert code == 0, (sweep, err)
    assert decision(sweep, "kept")[0] == "leave", sweep
    assert exists("kept"), "only a TTL ends it"
