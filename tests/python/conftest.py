"""Fixtures for the Python helper's tests: a wheel, a fresh venv with it installed, and an
environment that cannot see the developer's own sandguard config or state.

The wheel is the one named by $SANDGUARD_WHEEL (tests/run.sh builds it once, reusing cargo's
target directory), else one built here with `maturin build --release` (maturin from PyPI must
be installed next to this interpreter).
"""

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
IMAGE = "sandguard-test/busybox:latest"


def _build_wheel(out: Path) -> Path:
    maturin = shutil.which("maturin") or os.path.join(os.path.dirname(sys.executable), "maturin")
    subprocess.run(
        [maturin, "build", "--release", "--locked", "--out", str(out)],
        cwd=REPO,
        check=True,
    )
    wheels = sorted(out.glob("sandguard-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory) -> Path:
    given = os.environ.get("SANDGUARD_WHEEL")
    if given:
        path = Path(given)
        assert path.is_file(), f"SANDGUARD_WHEEL={given} is not a file"
        return path
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def pyenv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with only the wheel installed (no index: the wheel has no dependencies)."""
    root = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(root)
    subprocess.run(
        [str(root / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index",
         "--disable-pip-version-check", str(wheel)],
        check=True,
    )
    return root


@pytest.fixture(scope="session")
def docker_ready():
    if shutil.which("docker") is None:
        pytest.fail("docker CLI not found (tests/run.sh installs and starts it)")
    subprocess.run(["docker", "info"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["docker", "image", "inspect", IMAGE], check=True, stdout=subprocess.DEVNULL)


@pytest.fixture
def env(tmp_path, pyenv):
    """The environment of a guarded program: its own HOME, config and state, the venv first
    on PATH, and no SANDGUARD_BIN (the helper must find the wheel's binary itself)."""
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("SANDGUARD_")
         and k not in ("DOCKER_API_VERSION", "VIRTUAL_ENV", "TESTCONTAINERS_RYUK_DISABLED")}
    e.update(
        HOME=str(tmp_path),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        XDG_STATE_HOME=str(tmp_path / "state"),
        NO_COLOR="1",
        PATH=f"{pyenv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    return e


@pytest.fixture(scope="session")
def docker_sdk(pyenv) -> Path:
    """The wheel's venv plus docker-py (the `docker` package from PyPI), for the Docker API
    proxy's test: an unmodified SDK client must work through `sandguard run --docker-proxy`.
    Pinned, as the other clients the tests install are, so that README can say which version
    is proven (7.2.0: what the range `>=7,<8` this pin replaces last resolved to)."""
    subprocess.run(
        [str(pyenv / "bin" / "python"), "-m", "pip", "install", "-q",
         "--disable-pip-version-check", "docker==7.2.0"],
        check=True,
    )
    return pyenv
