"""The Docker API proxy with an unmodified Docker SDK: docker-py (from PyPI) under
`sandguard run --docker-proxy` creates containers (detached, attached with output, an exec),
a network and a volume; all are labelled with the session, and after a SIGKILL all are
reclaimed, while a container created outside the proxy survives, and so does a volume that
existed before `client.volumes.create` named it."""

import json
import shutil
import signal
import subprocess
import time

IMAGE = "sandguard-test/busybox:latest"

PROGRAM = r'''
import json, os, sys
import docker

u = sys.argv[1]
assert os.environ["DOCKER_HOST"].startswith("unix://"), os.environ.get("DOCKER_HOST")
client = docker.from_env()
IMAGE = "sandguard-test/busybox:latest"
box = client.containers.run(IMAGE, ["sleep", "600"], detach=True, network_mode="none")
said = client.containers.run(IMAGE, ["echo", "sdk-ok"], network_mode="none", remove=True)
code, out = box.exec_run(["echo", "exec-ok"])
net = client.networks.create("sg-py-" + u, internal=True)
vol = client.volumes.create("sg-py-" + u)
print(json.dumps({
    "container": box.id, "network": net.id, "volume": vol.name,
    "run": said.decode(), "exec": [code, out.decode()],
    "listed": [c.id for c in client.containers.list()],
}), flush=True)
sys.stdin.read()
'''


def inspect_label(kind, ident, key="sandguard.session"):
    path = ".Config.Labels" if kind == "container" else ".Labels"
    out = subprocess.run(
        ["docker", kind, "inspect", "-f", '{{index %s "%s"}}' % (path, key), ident],
        stdout=subprocess.PIPE, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def test_docker_sdk_through_the_proxy_is_labelled_and_reclaimed(tmp_path, docker_sdk, env,
                                                                 docker_ready):
    stranger = subprocess.run(
        ["docker", "run", "-d", "--network", "none", IMAGE, "sleep", "600"],
        check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    script = tmp_path / "sdk.py"
    script.write_text(PROGRAM)
    binary = shutil.which("sandguard", path=env["PATH"])
    assert binary, "the wheel's sandguard binary is on PATH"
    u = str(int(time.time() * 1000) % 10**9)
    proc = subprocess.Popen(
        [binary, "run", "--docker-proxy", "--", str(docker_sdk / "bin" / "python"),
         str(script), u],
        env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError("the SDK program failed: " + proc.stderr.read())
        info = json.loads(line)
        assert info["run"] == "sdk-ok\n"
        assert info["exec"] == [0, "exec-ok\n"]
        assert info["container"] in info["listed"]
        session = inspect_label("container", info["container"])
        assert session
        assert inspect_label("network", info["network"]) == session
        assert inspect_label("volume", info["volume"]) == session

        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = [inspect_label(k, info[k]) for k in ("container", "network", "volume")]
            if all(x is None for x in left):
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"not reclaimed within 10 s: {left}")
        assert inspect_label("container", stranger) is not None, "the stranger survives"
    finally:
        if proc.poll() is None:
            proc.kill()
        subprocess.run(["docker", "rm", "-f", stranger], stdout=subprocess.DEVNULL)


EXISTING = r'''
import json, sys
import docker

name = sys.argv[1]
client = docker.from_env()
vol = client.volumes.create(name=name)
box = client.containers.run("sandguard-test/busybox:latest", ["sleep", "600"], detach=True,
                            network_mode="none", volumes={name: {"bind": "/data", "mode": "rw"}})
print(json.dumps({"volume": vol.name, "labels": vol.attrs.get("Labels"), "container": box.id}),
      flush=True)
sys.stdin.read()
'''


def test_docker_sdk_volume_create_of_an_existing_volume_leaves_it_alone(tmp_path, docker_sdk, env,
                                                                        docker_ready):
    """Docker's volume create is idempotent: `client.volumes.create(name=existing)` through the
    proxy answers with the volume that was there, which is not the session's and must survive
    the owner's SIGKILL with its data (issue #10)."""
    name = "sg-py-precious-" + str(int(time.time() * 1000) % 10**9)
    subprocess.run(["docker", "volume", "create", "--label", "mine=yes", name], check=True,
                   stdout=subprocess.DEVNULL)
    proc, info = None, {}
    try:
        subprocess.run(["docker", "run", "--rm", "--network", "none", "-v", f"{name}:/data", IMAGE,
                        "sh", "-c", "echo keep > /data/file"], check=True)
        script = tmp_path / "existing.py"
        script.write_text(EXISTING)
        binary = shutil.which("sandguard", path=env["PATH"])
        proc = subprocess.Popen(
            [binary, "run", "--docker-proxy", "--", str(docker_sdk / "bin" / "python"),
             str(script), name],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        line = proc.stdout.readline()
        if not line:
            proc.kill()
            raise AssertionError("the SDK program failed: " + proc.stderr.read())
        info = json.loads(line)
        assert info["volume"] == name
        assert info["labels"] == {"mine": "yes"}, "the answer is the volume that was there"

        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        journals = tmp_path / "state" / "sandguard" / "sessions"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            ended = any('"ev":"end"' in j.read_text() for j in journals.glob("*.journal"))
            if ended and inspect_label("container", info["container"]) is None:
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the session was not reclaimed within 20 s")
        kept = subprocess.run(
            ["docker", "run", "--rm", "--network", "none", "-v", f"{name}:/data", IMAGE,
             "cat", "/data/file"], stdout=subprocess.PIPE, text=True)
        assert kept.stdout == "keep\n", "the volume that existed before survives, with its data"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        if info.get("container"):
            subprocess.run(["docker", "rm", "-f", info["container"]], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        subprocess.run(["docker", "volume", "rm", "-f", name], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


LIMITED = r'''
import json, os
import docker
import sandguard

IMAGE = "sandguard-test/busybox:latest"
with sandguard.guard(docker_proxy=True, max_sandboxes=1, renew_every=None) as g:
    client = docker.from_env()
    first = client.containers.create(IMAGE, ["true"], network_mode="none")
    try:
        client.containers.create(IMAGE, ["true"], network_mode="none")
        refused = None
    except docker.errors.APIError as e:
        refused = {"status": e.status_code, "explanation": str(e.explanation)}
    made = [c.id for c in client.containers.list(
        all=True, filters={"label": "sandguard.session=" + g.session})]
print(json.dumps({"first": first.id, "refused": refused, "made": made,
                  "state": g.outcome.state}), flush=True)
'''


def test_docker_py_gets_an_api_error_at_max_sandboxes_from_the_helper(tmp_path, docker_sdk, env,
                                                                      docker_ready):
    """`sandguard.guard(max_sandboxes=1)`: docker-py's second create raises its own APIError
    (403) with the proxy's message, the daemon made one container, and `bye` reclaims it."""
    script = tmp_path / "limited.py"
    script.write_text(LIMITED)
    out = subprocess.run([str(docker_sdk / "bin" / "python"), str(script)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["refused"] is not None, info
    assert info["refused"]["status"] == 403, info
    assert "sandguard: limit `sandboxes` reached" in info["refused"]["explanation"], info
    assert info["made"] == [info["first"]], info
    assert info["state"] == "clean", info
    assert inspect_label("container", info["first"]) is None, "bye reclaimed it"
