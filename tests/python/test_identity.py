"""The owner label two ways (issue 38): read from ``/proc`` by the helper, as it does on Linux,
and asked of the binary (``sandguard identity --pid``), as it does on macOS, where there is no
``/proc``. Both must give the same label to the character, or the sidecar would take the
program's sandboxes for someone else's; and the macOS path is the one a Linux run can take by
asking directly."""

import json
import signal
import subprocess
import time

LABELS = r'''
import json, os, shutil
from sandguard import _identity
print(json.dumps([_identity.owner_label(), _identity._ask(shutil.which("sandguard"), os.getpid())]))
'''


def test_the_label_read_here_is_the_one_the_binary_gives(pyenv, env):
    out = subprocess.run([str(pyenv / "bin" / "python"), "-c", LABELS], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    here, asked = json.loads(out)
    assert here == asked, (here, asked)
    assert len(here.split("-")) == 5, here


def test_asking_for_a_process_that_does_not_exist_is_an_error(pyenv, env):
    script = ("import shutil\nfrom sandguard import _identity, SandguardError\n"
              "try:\n    _identity._ask(shutil.which('sandguard'), 4194304)\n"
              "except SandguardError as e:\n    print('refused:', e)\n")
    out = subprocess.run([str(pyenv / "bin" / "python"), "-c", script], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    assert out.startswith("refused:") and "4194304" in out, out


MACOS_PATH = r'''
import json, os, subprocess, sys
import sandguard
from sandguard import _identity
# Found first: the standard library's sysconfig cannot find its paths once sys.platform says
# darwin on Linux. Then the helper's macOS path: no /proc read, the binary asked.
binary = sandguard.find_binary()
sys.platform = "darwin"
g = sandguard.guard(binary=binary, renew_every=None)
cid = subprocess.run(
    ["docker", "run", "-d", "--network", "none", *g.label_args(),
     "sandguard-test/busybox:latest", "sleep", "600"],
    check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
sys.platform = "linux"
print(json.dumps({"cid": cid, "owner": g.labels["sandguard.owner"],
                  "read": _identity.owner_label()}), flush=True)
sys.stdin.read()
'''


def test_a_program_guarded_the_macos_way_is_reclaimed_when_killed(tmp_path, pyenv, env,
                                                                 docker_ready):
    """The whole helper with ``sys.platform`` saying macOS: its owner label comes from the
    binary (the same as the one read from ``/proc``), and the sidecar, watching the owner it
    names, reclaims its container when it is SIGKILLed."""
    import signal
    import time
    proc = subprocess.Popen([str(pyenv / "bin" / "python"), "-c", MACOS_PATH], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, proc.communicate()[1]
    said = json.loads(line)
    assert said["owner"] == said["read"], said
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = subprocess.run(["docker", "ps", "-aq", "--no-trunc"], check=True,
                              stdout=subprocess.PIPE, text=True).stdout.split()
        if said["cid"] not in left:
            return
        time.sleep(0.1)
    subprocess.run(["docker", "rm", "-f", said["cid"]], stdout=subprocess.DEVNULL)
    raise AssertionError(f"{said['cid']} outlived its SIGKILLed owner by 30 s")
