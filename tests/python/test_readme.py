"""The documentation's Python snippet (the block marked `<!-- readme: run python-guard -->`,
in the book's SDK chapter), run as it is written, with the wheel's helper, against the real
daemon: everything it made is gone when its `with` block ends. The block is read out of the
documentation (README.md and book/src/*.md), so the two cannot drift apart (tests/cli/readme.rs
does the same for the shell snippets and checks that every block is either run or says why
not).

It runs as a user who never activated the venv runs it: the venv's python called by its path,
and no `sandguard` anywhere on PATH (not the venv's bin, not any other): the snippet's child
`sandguard claim` must be found through the helper (`sandguard.find_binary()`)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGE = "sandguard-test/busybox:latest"


def docs() -> list:
    """The documentation, in tests/cli/readme.rs's order: README.md, then book/src/*.md by name."""
    return [REPO / "README.md", *sorted((REPO / "book" / "src").glob("*.md"))]


def readme_block(name: str) -> str:
    want = f"<!-- readme: run {name}"
    for path in docs():
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            words = line.strip().split()
            if line.strip().startswith(want) and len(words) > 3 and words[3] == name:
                assert lines[i + 1].startswith("```"), f"no code block after {want!r} in {path}"
                end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
                return "\n".join(lines[i + 2:end])
    raise AssertionError(f"neither README.md nor book/src/*.md has a block marked {want!r}")


def exists(cid: str) -> bool:
    return subprocess.run(["docker", "container", "inspect", cid],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def test_the_readme_python_snippet_runs_and_leaves_nothing(tmp_path, pyenv, env,
                                                          docker_ready):
    # The snippet runs IMAGE, the test image tests/engine.sh made (nothing is pulled).
    # Run the block as written; after it, report what it made (its variables are in scope).
    program = readme_block("python-guard") + "\nimport json\nprint(json.dumps([cid, plain, other]))\n"
    script = tmp_path / "readme_snippet.py"
    script.write_text(program)
    # PATH without the venv's bin, and without any other directory holding a sandguard.
    path = os.pathsep.join(
        d for d in env["PATH"].split(os.pathsep)
        if d and Path(d).resolve() != (pyenv / "bin").resolve()
        and not (Path(d) / "sandguard").exists())
    env = dict(env, PATH=path)
    assert shutil.which("sandguard", path=path) is None, path
    assert shutil.which("docker", path=path) is not None, path
    out = subprocess.run([str(pyenv / "bin" / "python"), str(script)], env=env,
                         capture_output=True, text=True, timeout=120)
    made = []
    try:
        assert out.returncode == 0, out.stderr
        made = json.loads(out.stdout.strip().splitlines()[-1])
        assert len(made) == 3
        # The labelled, the claimed and the child-claimed container: all gone once the block
        # has returned (close() waits for the sidecar to finish).
        assert [c for c in made if exists(c)] == []
    finally:
        for c in made:
            subprocess.run(["docker", "rm", "-f", c], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
