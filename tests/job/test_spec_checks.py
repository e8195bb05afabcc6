"""Job options that would silently break a job are refused at submit, in one line."""

from __future__ import annotations

import pytest

from alchemist import client
from alchemist.errors import SpecError


@pytest.mark.parametrize(
    "key", ["RANK", "MASTER_PORT", "WORLD_SIZE", "ALCHEMIST_JOB_DIR", "LD_PRELOAD", "HOROVOD_RANK"]
)
def test_env_may_not_override_what_the_runtime_sets(key: str) -> None:
    with pytest.raises(SpecError, match=rf"{key} is set by Alchemist .* cannot be overridden"):
        client.submit("pass", namespace={}, env={key: "9"}, dry_run=True)
    assert client.jobs() == []


@pytest.mark.parametrize("name", ["None", "class", "1x", "a-b", ""])
def test_outputs_must_be_names_a_cell_can_assign(name: str) -> None:
    with pytest.raises(SpecError, match="is not a Python variable name"):
        client.submit("pass", namespace={}, outputs=[name], dry_run=True)


def test_ordinary_env_and_outputs_pass() -> None:
    dry = client.submit("x = 1", namespace={}, env={"SEED": "7"}, outputs=["x"], dry_run=True)
    assert dry.spec.env == {"SEED": "7"} and dry.spec.outputs == ["x"]


def test_the_local_backend_says_which_options_it_ignores(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dry = client.submit("x = 1", namespace={}, image="img:1", memory="8Gi", dry_run=True)
    assert "# warning: the local backend ignores --image, --memory" in dry.text
    job = client.submit("x = 1", namespace={}, workers=1, cpu="4")
    assert job.warnings == [
        "the local backend ignores --cpu (they size Kubernetes pods): its jobs run in this"
        " environment, on this machine's cores and memory"
    ]
    assert job.wait(timeout=120).state.value == "succeeded"
    assert client.submit("x = 1", namespace={}, dry_run=True).info.warnings == []
