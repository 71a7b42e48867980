"""Issue #15, points 1 and 3 together: ``sandguard.guard(cloud_proxy=True)`` points the
process's ``E2B_API_URL`` at the sidecar's cloud proxy, so that a child process using it
unchanged (it knows nothing of sandguard) creates a sandbox that carries the session's labels
and is claimed; ``close()`` reclaims that sandbox and puts ``E2B_API_URL`` back.

The E2B API here is a small server in this test process that records what reaches it: the
real wire format's create (``POST /sandboxes``, answered with a ``sandboxID``), the detail of
a sandbox it made (``GET /sandboxes/{id}``, which the reclaim looks a claim up by), listing and
delete, nothing more. The full E2B emulator and the vendor's SDK through the proxy are the
Rust suite's (tests/proxy/cloud.rs)."""

import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

KEY = "e2b_" + "5" * 32


class FakeE2b:
    """Records every request; creates answer a new id, a sandbox made and not deleted is
    detailed by its id, listings answer an empty page, deletes 204."""

    def __init__(self):
        self.requests = []
        self.made = {}
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body=None):
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                if body is not None:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                fake.requests.append((self.command, self.path, dict(self.headers), body))
                return body

            def do_POST(self):
                body = self._record()
                if self.path.split("?")[0] in ("/sandboxes", "/v2/sandboxes"):
                    sid = f"sbx{len(fake.requests):04d}"
                    fake.made[sid] = json.loads(body or b"{}").get("metadata") or {}
                    return self._answer(201, {"sandboxID": sid, "clientID": "c",
                                              "templateID": "base", "envdVersion": "0.2.0"})
                self._answer(404, {"code": 404, "message": "not found"})

            def do_GET(self):
                self._record()
                if self.path.startswith("/v2/sandboxes"):
                    return self._answer(200, [])
                sid = self.path.split("?")[0].removeprefix("/sandboxes/")
                if sid in fake.made:
                    return self._answer(200, {"sandboxID": sid, "templateID": "base",
                                              "metadata": fake.made[sid], "state": "running"})
                self._answer(404, {"code": 404, "message": f"sandbox \"{sid}\" not found"})

            def do_DELETE(self):
                self._record()
                fake.made.pop(self.path.split("?")[0].removeprefix("/sandboxes/"), None)
                self._answer(204)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# argv: CONFIG. A guard with the cloud proxy; a child that creates a sandbox through
# $E2B_API_URL with plain urllib; close; what the program saw.
GUARDED = r'''
import json, os, subprocess, sys
import sandguard

before = os.environ.get("E2B_API_URL")
g = sandguard.guard(cloud_proxy=True, config=sys.argv[1], renew_every=None)
during = os.environ.get("E2B_API_URL")
CHILD = """
import json, os, urllib.request
body = json.dumps({"templateID": "base", "metadata": {"mine": "1", "sandguard.session": "forged"}})
req = urllib.request.Request(os.environ["E2B_API_URL"] + "/sandboxes", data=body.encode(),
                             method="POST", headers={"X-API-Key": os.environ["E2B_API_KEY"],
                                                     "Content-Type": "application/json"})
print(json.loads(urllib.request.urlopen(req).read())["sandboxID"])
"""
sid = subprocess.run([sys.executable, "-c", CHILD], check=True, stdout=subprocess.PIPE,
                     text=True).stdout.strip()
outcome = g.close()
print(json.dumps({"session": g.session, "before": before, "during": during, "sid": sid,
                  "after": os.environ.get("E2B_API_URL"),
                  "outcome": [outcome.state, outcome.clean]}))
'''


def test_a_child_creating_through_the_exported_url_is_stamped_claimed_and_reclaimed(
        tmp_path, pyenv, env):
    fake = FakeE2b()
    try:
        config = tmp_path / "sandguard.toml"
        config.write_text("[reclaim]\nsettle = \"0\"\n[providers.docker]\nenabled = false\n")
        script = tmp_path / "guarded.py"
        script.write_text(GUARDED)
        run_env = dict(env, E2B_API_KEY=KEY, E2B_API_URL=fake.url)
        out = subprocess.run([str(pyenv / "bin" / "python"), str(script), str(config)],
                             env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        said = json.loads(out.stdout)
    finally:
        fake.close()

    # The program (and its child) were pointed at the proxy, and got their variable back.
    assert said["before"] == fake.url and said["after"] == fake.url, said
    assert said["during"].startswith("http://127.0.0.1:") and said["during"] != fake.url, said

    creates = [r for r in fake.requests if r[0] == "POST"]
    assert len(creates) == 1, fake.requests
    _, path, headers, body = creates[0]
    metadata = json.loads(body)["metadata"]
    # The session's labels were merged in (its values win over the program's), the program's
    # own keys kept, and its key passed on as it sent it.
    assert metadata["sandguard.session"] == said["session"], metadata
    assert metadata["mine"] == "1", metadata
    assert {k.lower(): v for k, v in headers.items()}["x-api-key"] == KEY

    # The id was claimed: close() reclaimed it by id, and said the session ended clean.
    deletes = [r[1] for r in fake.requests if r[0] == "DELETE"]
    assert deletes == [f"/sandboxes/{said['sid']}"], fake.requests
    assert said["outcome"] == ["clean", True], said
