"""A job's folder is its owner's from the moment it exists, whatever the umask.

What is real: ``alchemist.submit`` (spec, record, bundle with the script's own module as a
file), the job directory, ``config.home()``/``jobs_root()``, the process umask, and, when
the tests run as root, another account (``nobody``) trying to read the job. Stand-in: the
backend is :class:`alchemist.testing.fakes.NeverStartsBackend` (it writes only
``state.json``; what a real launcher writes later is not covered here).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from alchemist import client
from alchemist.job import config
from alchemist.job.jobdir import JobDir, make_private_dir
from alchemist.testing.fakes import NeverStartsBackend
from tests.support.helpers import as_nobody

SCRIPT = "from helper import VALUE\nprint(VALUE)\n"


@pytest.fixture
def umask() -> Iterator[Callable[[int], int]]:
    """``umask(m)`` sets this process's umask for the test; the old one comes back after."""
    old = os.umask(0o022)
    os.umask(old)
    yield os.umask
    os.umask(old)


def _script(folder: Path) -> Path:
    """A script that imports a module of its own folder (so the bundle has ``files/``)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "helper.py").write_text("VALUE = 42\n")
    script = folder / "train.py"
    script.write_text(SCRIPT)
    return script


def _open_to_others(root: Path) -> list[str]:
    """Every path under ``root`` (``root`` too) that group or others may use."""
    found = []
    for path in [root, *root.rglob("*")]:
        mode = path.lstat().st_mode
        if mode & 0o077:
            found.append(f"{path.relative_to(root.parent)} {stat.filemode(mode)}")
    return found


@pytest.mark.parametrize("mask", [0o000, 0o022])
def test_a_new_job_and_the_folders_above_it_are_private_from_the_start(
    mask: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    umask: Callable[[int], int],
    fake_backend: Callable[[type], str],
) -> None:
    backend = fake_backend(NeverStartsBackend)
    home = tmp_path / "fresh" / "alchemist"  # Alchemist makes all of it
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    script = _script(tmp_path / "project")
    # The modes the job's folders have the moment JobDir.create returns, before anything
    # else runs: a chmod afterwards would leave a moment when they are open.
    at_creation: dict[str, int] = {}
    create = JobDir.create

    def observed_create(self: JobDir) -> JobDir:
        create(self)
        for path in [self.root, *self.root.rglob("*")]:
            at_creation[str(path.relative_to(self.root))] = path.stat().st_mode & 0o777
        return self

    monkeypatch.setattr(JobDir, "create", observed_create)
    umask(mask)
    job = client.submit(script, backend=backend)

    assert at_creation and set(at_creation.values()) == {0o700}, at_creation
    root = job.job_dir.root
    for folder in (tmp_path / "fresh", home, home / "jobs"):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    # What submit wrote is there, and none of it is open to group or others.
    written = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}
    assert {"spec.json", "record.json", "state.json", "bundle/files/helper.py"} <= written
    assert {"bundle/source.py", "bundle/namespace.pkl", "bundle/manifest.json"} <= written
    assert _open_to_others(root) == []


@pytest.fixture
def open_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An ``ALCHEMIST_HOME`` other accounts may enter, with a ``jobs`` folder an earlier
    version left open (0755): only the job's own folder can keep others out."""
    top = Path(tempfile.mkdtemp(prefix="alchemist-jobdir-"))
    os.chmod(top, 0o755)
    home = top / "home"
    (home / "jobs").mkdir(parents=True)
    os.chmod(home, 0o755)
    os.chmod(home / "jobs", 0o755)
    monkeypatch.setenv("ALCHEMIST_HOME", str(home))
    yield home
    shutil.rmtree(top, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another account")
def test_another_user_cannot_read_a_new_job_even_under_umask_0(
    open_home: Path,
    tmp_path: Path,
    umask: Callable[[int], int],
    fake_backend: Callable[[type], str],
) -> None:
    """``nobody`` tries to list the job's folder and read its spec and bundle, and fails."""
    backend = fake_backend(NeverStartsBackend)
    script = _script(tmp_path / "project")
    umask(0o000)
    job = client.submit(script, backend=backend)
    root = job.job_dir.root
    # The control: nobody does reach the jobs folder, so the refusals below are the job
    # folder's own doing.
    listed = as_nobody("ls", str(open_home / "jobs"))
    assert listed.returncode == 0 and job.id in listed.stdout
    for argv in (
        ("ls", str(root)),
        ("cat", str(root / "spec.json")),
        ("cat", str(root / "bundle" / "source.py")),
        ("cat", str(root / "bundle" / "files" / "helper.py")),
    ):
        denied = as_nobody(*argv)
        assert denied.returncode != 0 and "Permission denied" in denied.stderr, argv


def test_make_private_dir_makes_each_missing_folder_0700_and_leaves_others(
    tmp_path: Path, umask: Callable[[int], int]
) -> None:
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o755)
    os.chmod(existing, 0o755)
    umask(0o000)
    made = make_private_dir(existing / "a" / "b" / "c")
    assert made == existing / "a" / "b" / "c"
    for folder in (existing / "a", existing / "a" / "b", made):
        assert folder.stat().st_mode & 0o777 == 0o700, folder
    assert existing.stat().st_mode & 0o777 == 0o755  # not ours to change
    assert make_private_dir(made) == made  # already there: fine
    (existing / "file").write_text("x")
    with pytest.raises(FileExistsError):
        make_private_dir(existing / "file")


def test_config_makes_a_missing_home_and_jobs_folder_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask: Callable[[int], int]
) -> None:
    monkeypatch.setenv("ALCHEMIST_HOME", str(tmp_path / "h"))
    umask(0o000)
    jobs = config.jobs_root()
    assert jobs == tmp_path / "h" / "jobs"
    assert (tmp_path / "h").stat().st_mode & 0o777 == 0o700
    assert jobs.stat().st_mode & 0o777 == 0o700
