"""Each Kubernetes backend setting is declared once: its default, help and variable
come from the trait, and the docs table and the chart's default agree with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from traitlets.config import Config

from alchemist.backends.kubernetes import KubernetesBackend
from alchemist.backends.kubernetes.config import (
    DEFAULT_SHM_SIZE,
    ENV_VARS,
    KubernetesConfig,
    settings_table,
)
from alchemist.backends.kubernetes.manifests import Settings
from alchemist.errors import BackendError

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)


def test_the_docs_table_is_the_declarations() -> None:
    docs = (REPO / "docs" / "kubernetes.md").read_text()
    assert settings_table(KubernetesConfig) in docs, (
        "docs/kubernetes.md's settings table is out of date: paste settings_table(KubernetesConfig)"
    )


def test_every_setting_has_help_and_a_variable_derived_from_its_name() -> None:
    traits = KubernetesConfig.class_traits(config=True)
    assert set(ENV_VARS) == set(traits)
    for name, trait in traits.items():
        assert trait.help, name
        assert ENV_VARS[name] == "ALCHEMIST_K8S_" + name.upper()


def test_the_manifest_snapshot_and_the_chart_share_the_defaults() -> None:
    assert Settings("ns", "img", "pvc", "/m").shm_size == DEFAULT_SHM_SIZE
    assert KubernetesBackend(config=Config()).shm_size == DEFAULT_SHM_SIZE
    values = yaml.safe_load((REPO / "helm" / "alchemist" / "values.yaml").read_text())
    assert values["workers"]["shmSize"] == DEFAULT_SHM_SIZE


def test_precedence_config_then_variable_then_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert KubernetesBackend(config=Config()).ttl == 3600
    monkeypatch.setenv("ALCHEMIST_K8S_TTL", "60")
    monkeypatch.setenv("ALCHEMIST_K8S_TOLERATIONS", '[{"key": "gpu"}]')
    assert KubernetesBackend(config=Config()).ttl == 60
    assert KubernetesBackend(config=Config()).tolerations == [{"key": "gpu"}]
    c = Config()
    c.KubernetesBackend.ttl = 5
    assert KubernetesBackend(config=c).ttl == 5
    assert KubernetesBackend(config=Config(), ttl=7).ttl == 7


@pytest.mark.parametrize(
    ("var", "raw", "message"),
    [
        ("ALCHEMIST_K8S_TTL", "soon", "ALCHEMIST_K8S_TTL must be an integer, got 'soon'"),
        ("ALCHEMIST_K8S_REQUEST_TIMEOUT", "x", "ALCHEMIST_K8S_REQUEST_TIMEOUT must be a number"),
        ("ALCHEMIST_K8S_NODE_SELECTOR", "[1]", "ALCHEMIST_K8S_NODE_SELECTOR must be a JSON dict"),
        ("ALCHEMIST_K8S_TOLERATIONS", "{", "ALCHEMIST_K8S_TOLERATIONS is not valid JSON"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, var: str, raw: str, message: str
) -> None:
    monkeypatch.setenv(var, raw)
    with pytest.raises(BackendError, match=message) as e:
        KubernetesBackend(config=Config())
    assert len(str(e.value).splitlines()) == 1
