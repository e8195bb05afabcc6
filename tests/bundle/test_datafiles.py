"""Which files of the notebook's folder travel to workers that cannot see it
(Kubernetes pods), and the one-line refusal when they are too many or too big.

Real files in a temporary folder; the pods that read them are run in
``tests/backends/kubernetes/test_k8s_rendezvous.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from alchemist import client
from alchemist.bundle import build_bundle
from alchemist.bundle.datafiles import select_data_files
from alchemist.errors import BundleError, SpecError


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "nb"
    for rel, data in {
        "train.ipynb": b"{}",
        "data/train.csv": b"x,y\n1,2\n",
        "data/raw/huge.bin": b"\0" * 5000,
        "checkpoints/last.pt": b"\1" * 300,
        ".secret/token": b"hidden",
        ".env": b"hidden",
        "__pycache__/m.cpython-311.pyc": b"compiled",
        ".ipynb_checkpoints/train-checkpoint.ipynb": b"{}",
    }.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def test_everything_but_hidden_and_caches_travels_by_default(folder: Path) -> None:
    got = select_data_files(str(folder), max_bytes=1 << 20)
    assert sorted(got.sizes) == [
        "checkpoints/last.pt",
        "data/raw/huge.bin",
        "data/train.csv",
        "train.ipynb",
    ]
    assert got.total == 2 + 8 + 5000 + 300


def test_ignore_file_and_exclude_leave_files_behind(folder: Path) -> None:
    (folder / ".alchemistignore").write_text("# big things\ndata/raw/\n*.pt\n")
    got = select_data_files(str(folder), max_bytes=1 << 20)
    assert sorted(got.sizes) == ["data/train.csv", "train.ipynb"]
    got = select_data_files(str(folder), exclude=["*.ipynb"], max_bytes=1 << 20)
    assert sorted(got.sizes) == ["data/train.csv"]


def test_include_ships_only_what_it_names(folder: Path) -> None:
    got = select_data_files(str(folder), include=["data/*.csv"], max_bytes=1 << 20)
    assert sorted(got.sizes) == ["data/train.csv"]
    got = select_data_files(str(folder), include=["data/"], exclude=["raw/"], max_bytes=1 << 20)
    assert sorted(got.sizes) == ["data/train.csv"]


def test_too_big_is_one_line_naming_the_biggest_file_and_the_fix(folder: Path) -> None:
    with pytest.raises(BundleError) as err:
        select_data_files(str(folder), max_bytes=1000)
    msg = str(err.value)
    assert "\n" not in msg
    assert "data/raw/huge.bin" in msg and "--exclude 'data/raw/huge.bin'" in msg
    assert "nothing was submitted" in msg
    # the fix it names works
    got = select_data_files(str(folder), exclude=["data/raw/huge.bin"], max_bytes=1000)
    assert "data/raw/huge.bin" not in got.sizes


def test_alchemist_home_under_the_folder_never_travels(folder: Path) -> None:
    home = folder / "state"
    (home / "jobs" / "j1").mkdir(parents=True)
    (home / "jobs" / "j1" / "spec.json").write_text("{}")
    got = select_data_files(str(folder), max_bytes=1 << 20, skip=[str(home)])
    assert not any(rel.startswith("state/") for rel in got.sizes)


def test_bad_patterns_are_refused_at_submit(alchemist_home: Path) -> None:
    with pytest.raises(SpecError, match="--include expects file patterns"):
        client.make_spec(include=[""])
    with pytest.raises(SpecError, match="--exclude"):
        client.make_spec(exclude=["a\0b"])


def test_the_dry_run_lists_what_travels_and_its_size(folder: Path) -> None:
    bundle = build_bundle(
        "print(open('data/train.csv').read())",
        {},
        max_value_bytes=1 << 20,
        cwd=str(folder),
        ship_data=True,
        exclude=["data/raw/", "checkpoints/"],
    )
    text = bundle.describe()
    assert "data     2 files of" in text and "data/train.csv" in text and "10 B" in text
    assert "huge.bin" not in text
    # Without ship_data (the local backend) nothing is copied: the job runs in the folder.
    local = build_bundle("print(1)", {}, max_value_bytes=1 << 20, cwd=str(folder))
    assert local.data is None and "data " not in local.describe()


def test_the_local_backend_warns_that_it_ignores_include_and_exclude(
    alchemist_home: Path,
) -> None:
    dry = client.submit("print(1)", dry_run=True, workers=1, exclude=["data/"])
    assert any("ignores --exclude" in w for w in dry.info.warnings)
