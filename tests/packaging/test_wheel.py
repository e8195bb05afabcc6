"""The built wheel, installed into a fresh virtual environment outside the checkout, gives
the side panel, the REST API's server extension, the CLI and a startable embedded hub.

The wheel is built from this checkout (``pip wheel --no-build-isolation``: the
jupyter-builder hook takes the panel scripts/setup.d/60-labextension.sh built, or builds
it with jlpm when it is missing). The fresh environment gets Alchemist only from that
wheel. Its dependencies (torch, JupyterLab, JupyterHub, ...) are not installed again (that
would take minutes and a package index): the environment sees the checkout venv's
site-packages through a directory of links that leaves out every trace of the editable
Alchemist install (its package, dist-info and ``.pth``). Everything Jupyter reads
(``share/jupyter``, ``etc/jupyter``) and the ``alchemist`` scripts come from the fresh
environment, and every command runs outside the checkout with a fresh ``HOME``.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.support.hubproc import PROXY, free_port, wait_until

REPO = Path(__file__).resolve().parents[2]
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@dataclass(frozen=True)
class FreshEnv:
    """A virtual environment holding the installed wheel."""

    prefix: Path
    env: dict[str, str]
    cwd: Path

    @property
    def python(self) -> Path:
        return self.prefix / "bin" / "python"

    def run(self, *args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a command in the environment; stdout and stderr together, ANSI colours off."""
        proc = subprocess.run(
            [str(a) for a in args],
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        proc.stdout = ANSI.sub("", proc.stdout + proc.stderr)
        return proc


def _is_editable_alchemist(name: str) -> bool:
    return name == "alchemist" or name.startswith(
        ("jupyter_alchemist-", "_editable_impl_jupyter_alchemist")
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(out),
            str(REPO),
        ],
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        },
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("jupyter_alchemist-*.whl")
    return built


def test_a_wheel_without_the_panel_is_refused(tmp_path: Path) -> None:
    """The jupyter-builder hook guards the wheel: in a clone where the panel is not built
    and npm is skipped, the build fails naming the missing panel files instead of
    producing a wheel without the side panel (what happened before the hook)."""
    clone = tmp_path / "clone"
    tracked = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    for name in tracked:
        if (REPO / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, clone / name)
    assert not (clone / "alchemist" / "labextension").exists()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--disable-pip-version-check",
            "-w",
            str(tmp_path / "out"),
            str(clone),
        ],
        env={**os.environ, "HATCH_JUPYTER_BUILDER_SKIP_NPM": "1"},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode != 0
    assert "alchemist/labextension/package.json" in proc.stdout + proc.stderr
    assert not list((tmp_path / "out").glob("*.whl"))


@pytest.fixture(scope="module")
def fresh(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> FreshEnv:
    root = tmp_path_factory.mktemp("fresh")
    assert REPO not in root.parents, "the fresh environment must live outside the checkout"
    prefix = root / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(prefix)], check=True, timeout=60
    )
    # The checkout venv's dependencies, minus the editable Alchemist.
    deps = root / "deps"
    deps.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if not _is_editable_alchemist(entry.name):
            (deps / entry.name).symlink_to(entry)
    site = Path(
        subprocess.check_output(
            [
                str(prefix / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            text=True,
        ).strip()
    )
    (site / "zz_alchemist_test_deps.pth").write_text(
        f"import site; site.addsitedir({str(deps)!r})\n"
    )
    home = root / "home"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "JUPYTER", "VIRTUAL_ENV", "ALCHEMIST_"))
    }
    env.update(HOME=str(home), PATH=f"{prefix / 'bin'}{os.pathsep}/usr/bin:/bin")
    fresh = FreshEnv(prefix=prefix, env=env, cwd=root)
    proc = fresh.run(fresh.python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel)
    assert proc.returncode == 0, proc.stdout
    return fresh


def test_the_installed_package_is_the_wheel_and_has_one_version(
    fresh: FreshEnv, wheel: Path
) -> None:
    proc = fresh.run(
        fresh.python,
        "-c",
        "import alchemist, importlib.metadata as m;"
        " print(alchemist.__file__); print(alchemist.__version__); print(m.version('jupyter-alchemist'))",
    )
    assert proc.returncode == 0, proc.stdout
    where, version, dist_version = proc.stdout.split()
    assert Path(where).is_relative_to(fresh.prefix)
    assert version == dist_version
    assert wheel.name.startswith(f"jupyter_alchemist-{version}-")


def test_jupyterlab_lists_the_panel_enabled(fresh: FreshEnv) -> None:
    proc = fresh.run(
        fresh.python, "-c", "from jupyterlab.labextensions import main; main()", "list"
    )
    assert proc.returncode == 0, proc.stdout
    assert re.search(
        r"alchemist-jupyterlab v\S+ enabled\s+OK \(python, jupyter-alchemist\)", proc.stdout
    ), proc.stdout
    panel = fresh.prefix / "share" / "jupyter" / "labextensions" / "alchemist-jupyterlab"
    assert (panel / "package.json").is_file() and (panel / "install.json").is_file()
    assert not panel.is_symlink()


def test_jupyter_server_enables_the_rest_api(fresh: FreshEnv) -> None:
    proc = fresh.run(
        fresh.python,
        "-c",
        "from jupyter_server.extension.serverextension import main; main()",
        "list",
    )
    assert proc.returncode == 0, proc.stdout
    assert re.search(r"alchemist\.server\s+enabled", proc.stdout), proc.stdout
    assert re.search(r"alchemist\.server\s+\S*\s*OK", proc.stdout), proc.stdout
    assert (
        fresh.prefix / "etc" / "jupyter" / "jupyter_server_config.d" / "alchemist.json"
    ).is_file()


def test_alchemist_cli_runs(fresh: FreshEnv) -> None:
    proc = fresh.run(fresh.prefix / "bin" / "alchemist", "--help")
    assert proc.returncode == 0, proc.stdout
    assert "usage: alchemist" in proc.stdout


@pytest.fixture
def hub(fresh: FreshEnv) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    if not PROXY.exists():
        pytest.fail("configurable-http-proxy is missing: run bash scripts/setup.d/10-hub.sh")
    port = free_port()
    state = fresh.cwd / "hub-state"
    log = fresh.cwd / "hub.log"
    env = {
        **fresh.env,
        "ALCHEMIST_HUB_DIR": str(state),
        "ALCHEMIST_HUB_PORT": str(port),
        "ALCHEMIST_HUB_API_PORT": str(free_port()),
        "ALCHEMIST_HUB_PROXY_PORT": str(free_port()),
        "ALCHEMIST_HUB_ISOLATION": "single",
        # CI runs as root, where `single` would run every user as root: this test starts
        # the hub only to see it answer, so it opts in (docs/hub.md).
        "ALCHEMIST_HUB_ALLOW_ROOT_SINGLE": "1",
        # The wheel ships no Node program: a user installs the proxy (npm); here, the one
        # scripts/setup.d/10-hub.sh installed.
        "ALCHEMIST_HUB_PROXY_CMD": str(PROXY),
    }
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(fresh.prefix / "bin" / "alchemist-hub"), "start"],
            cwd=fresh.cwd,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}/", proc, log
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def test_embedded_hub_starts_from_the_installed_package(
    fresh: FreshEnv, hub: tuple[str, subprocess.Popen[str], Path]
) -> None:
    url, proc, log = hub

    def healthy() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"hub exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return requests.get(url + "hub/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until("the installed hub to answer on /hub/health", healthy, timeout=90)
    assert requests.get(url + "hub/api/", timeout=5).json()["version"]
    # Its config file and example notebooks are the installed package's, not the checkout's.
    found = fresh.run(
        fresh.python,
        "-c",
        "from alchemist.hub.embedded.__main__ import config_file;"
        " from alchemist.hub.embedded.settings import CHECKOUT_ROOT, default_notebooks;"
        " print(config_file()); print(default_notebooks()); print(CHECKOUT_ROOT)",
    )
    config, notebooks, checkout = found.stdout.split()
    assert Path(config).is_relative_to(fresh.prefix), config
    assert Path(notebooks).is_relative_to(fresh.prefix), notebooks
    assert sorted(p.name for p in Path(notebooks).glob("*.ipynb")) == sorted(
        p.name for p in (REPO / "notebooks").glob("*.ipynb")
    )
    assert checkout == "None"
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    with pytest.raises(requests.ConnectionError):
        requests.get(url + "hub/health", timeout=2)
