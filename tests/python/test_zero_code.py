"""Zero code by default: `sandguard -- python prog.py` with no flags, where prog.py is plain
docker-py code that knows nothing of sandguard (no labels, no claims, no import). The Docker
proxy is on by default because the daemon answers, so what the program creates is labelled
and claimed, and a SIGKILL of the program reclaims it; a container made outside it stays."""

import json
import shutil
import signal
import subprocess
import time

IMAGE = "sandguard-test/busybox:latest"

PROGRAM = r'''
import json, sys
import docker

client = docker.from_env()
box = client.containers.run("sandguard-test/busybox:latest", ["sleep", "600"], detach=True,
                            network_mode="none")
print(json.dumps({"container": box.id}), flush=True)
sys.stdin.read()
'''


def exists(container):
    return subprocess.run(["docker", "inspect", container], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def test_an_unmodified_docker_py_program_with_no_flags_is_reclaimed_after_sigkill(
        tmp_path, docker_sdk, env, docker_ready):
    stranger = subprocess.run(
        ["docker", "run", "-d", "--network", "none", IMAGE, "sleep", "600"],
        check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    binary = shutil.which("sandguard", path=env["PATH"])
    assert binary, "the wheel's sandguard binary is on PATH"
    proc = subprocess.Popen(
        [binary, "--", str(docker_sdk / "bin" / "python"), str(script)],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError("the program failed: " + proc.stderr.read())
        container = json.loads(line)["container"]
        assert exists(container)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while exists(container):
            assert time.monotonic() < deadline, "not reclaimed within 10 s"
            time.sleep(0.05)
        assert exists(stranger), "a container made outside the program stays"
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["docker", "rm", "-f", stranger], stdout=subprocess.DEVNULL)
