"""The owner label two ways (issue 38): read from ``/proc`` by the helper, as it does on Linux,
and asked of the binary (``sandguard identity --pid``), as it does on macOS, where there is no
``/proc``. Both must give the same label to the character, or the sidecar would take the
program's sandboxes for someone else's; and the macOS path is the one a Linux run can take by
asking directly."""

import json
import subprocess

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
