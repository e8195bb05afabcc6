"""The chart against a REAL cluster (marker ``k8s``); skips itself when none answers.

``helm install --dry-run=server`` sends every rendered object to the API server, which
validates and admits it (RBAC, quotas, admission webhooks) without creating anything.
It needs a kubeconfig (``KUBECONFIG`` or ``~/.kube/config``) whose user may create the
chart's objects in ``ALCHEMIST_K8S_NAMESPACE`` (default ``default``); Kueue objects are
included only when the cluster serves Kueue's API.

Run: ``pytest -m k8s tests/hub/kubernetes/test_chart_real_cluster.py``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.support.chart import CHART, run_helm

pytestmark = pytest.mark.k8s


def cluster_api() -> Any:
    """An ApiClient for the kubeconfig's cluster, or skip saying why."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_kube_config(client_configuration=cfg)
    except Exception as e:
        pytest.skip(f"no kubeconfig reaches a cluster ({type(e).__name__})")
    api = client.ApiClient(cfg)
    try:
        client.VersionApi(api).get_code(_request_timeout=5)
    except Exception as e:
        api.close()
        pytest.skip(f"the Kubernetes API at {cfg.host} does not answer ({type(e).__name__})")
    return api


def test_server_accepts_the_chart(helm: str) -> None:
    from kubernetes import client

    api = cluster_api()
    try:
        groups = {g.name for g in client.ApisApi(api).get_api_versions().groups}
    finally:
        api.close()
    namespace = os.environ.get("ALCHEMIST_K8S_NAMESPACE", "default")
    args = [
        "install",
        "alchemist-dry-run",
        str(CHART),
        "--namespace",
        namespace,
        "--dry-run=server",
    ]
    if "kueue.x-k8s.io" in groups:
        args += ["--set", "kueue.enabled=true"]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stderr
