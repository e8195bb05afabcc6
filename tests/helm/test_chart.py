"""The Helm chart, checked with a real Helm (v3.16, from the npm package named in
ENVIRONMENT.md) and real Kubernetes 1.33 schemas (kubernetes-validate, strict).

No API server runs here, so nothing is installed: ``helm lint`` and ``helm template``
render the chart offline, and every rendered object is validated against the schema
of its kind. Kueue objects are validated against ``kueue_v1beta1.schema.json`` (strict
schemas written from Kueue's v1beta1 API reference), as kubernetes-validate has no CRDs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from traitlets.config import Config

from alchemist.hub.kubernetes import backend_environment, configure_hub
from alchemist.hub.kubernetes.tenancy import USER_RULES
from tests.support.chart import (
    ALL_ON_VALUES,
    CHART,
    SHARED_VALUES,
    find,
    render,
    render_uncached,
    run_helm,
)

K8S_VERSION = "1.33.0"
KUEUE_SCHEMAS = json.loads(
    (Path(__file__).resolve().parent / "kueue_v1beta1.schema.json").read_text()
)["kinds"]

#: What every case renders for isolation: the release namespace's NetworkPolicies (hub,
#: proxy) and the admission policy of user Services (docs/kubernetes.md, Isolation).
ISOLATION = {"NetworkPolicy", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}

#: (values files) -> kinds that must be rendered.
CASES = {
    # A namespace per user: the users' objects are the hub's to create (tenancy.py).
    "defaults": (
        (),
        {
            "ConfigMap",
            "Secret",
            "Deployment",
            "Service",
            "PersistentVolumeClaim",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            *ISOLATION,
        },
    ),
    "all-on": (
        (ALL_ON_VALUES,),
        {
            "ConfigMap",
            "Secret",
            "Deployment",
            "Service",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Ingress",
            "ResourceFlavor",
            "ClusterQueue",
            *ISOLATION,
        },
    ),
    # One trusted team in one namespace: the chart makes its accounts, rights and claim.
    "shared": (
        (SHARED_VALUES,),
        {
            "ConfigMap",
            "Secret",
            "Deployment",
            "Service",
            "PersistentVolumeClaim",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            *ISOLATION,
        },
    ),
}


def validate(doc: dict[str, Any]) -> None:
    """Validate one object strictly against its kind's schema (raises on any problem)."""
    if doc["apiVersion"].startswith("kueue.x-k8s.io/"):
        jsonschema.validate(doc, KUEUE_SCHEMAS[doc["kind"]])
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def hub_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = find(docs, "ConfigMap", "-hub-config")
    loaded: dict[str, Any] = yaml.safe_load(cm["data"]["hub-config.yaml"])
    return loaded


@pytest.mark.parametrize(
    "values",
    [(), (ALL_ON_VALUES,), (ALL_ON_VALUES, SHARED_VALUES)],
    ids=["defaults", "all-on", "all-on-shared"],
)
def test_helm_lint_strict_is_clean(helm: str, values: tuple[Path, ...]) -> None:
    args = ["lint", "--strict", str(CHART)]
    for f in values:
        args += ["--values", str(f)]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_rendered_object_is_valid_kubernetes(helm: str, case: str) -> None:
    values, kinds = CASES[case]
    docs = render(helm, values)
    assert {d["kind"] for d in docs} == kinds
    for doc in docs:
        try:
            validate(doc)
        except Exception as e:  # name the object: a bare schema error says too little
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} is invalid: {e}")


def test_strict_validation_catches_an_unknown_field(helm: str) -> None:
    """The validation above is not vacuous: a misspelt field in a rendered object fails."""
    docs = render(helm)
    (hub,) = find(docs, "Deployment", "-hub")
    hub["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(hub)
    docs = render(helm, (ALL_ON_VALUES,))
    (cq,) = find(docs, "ClusterQueue")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["quota"] = 3
    with pytest.raises(jsonschema.ValidationError):
        validate(cq)


@pytest.mark.parametrize(
    ("sets", "complaint"),
    [
        (["singleuser.uid=0"], "singleuser.uid"),
        (["hub.authenticator=pam"], "hub.authenticator"),
        (["hub.unknownKey=1"], "unknownKey"),
        (["singleuser.profiles[0].slug=GPU_1", "singleuser.profiles[0].displayName=x"], "slug"),
        (
            [
                "singleuser.profiles[0].slug=big",
                "singleuser.profiles[0].displayName=Big",
                "singleuser.profiles[0].gpus=-2",
            ],
            "gpus",
        ),
        (["proxy.service.type=Magic"], "proxy.service.type"),
        (["shared.mountPath=relative/path"], "shared.mountPath"),
    ],
)
def test_schema_rejects_bad_values(helm: str, sets: list[str], complaint: str) -> None:
    args = ["template", "demo", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = run_helm(helm, *args)
    assert proc.returncode != 0
    assert "don't meet the specifications of the schema" in proc.stderr
    assert complaint in proc.stderr, proc.stderr


def rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def grid(groups: str, resources: list[str], verbs: list[str]) -> set[tuple[str, str, str]]:
    return {(groups, r, v) for r in resources for v in verbs}


#: tenancy.mode shared with every other feature on: the chart makes the users' objects.
ALL_ON_SHARED = (ALL_ON_VALUES, SHARED_VALUES)


def test_user_pods_may_manage_exactly_jobs_services_pods_and_logs(helm: str) -> None:
    """tenancy.mode shared: the chart's own user Role (in namespaces mode the hub makes
    one per user; tests/hub/kubernetes/test_tenancy.py checks those)."""
    docs = render(helm, ALL_ON_SHARED)
    (role,) = find(docs, "Role", "-user")
    assert role["metadata"]["namespace"] == "alchemist-users"
    # The same rights as each user's Role in namespaces mode (one list: tenancy.USER_RULES).
    assert rules(role) == rules({"rules": USER_RULES})
    assert rules(role) >= (
        grid("batch", ["jobs"], ["get", "list", "watch", "create", "delete"])
        | grid("", ["services"], ["get", "list", "watch", "create", "delete"])
        | grid("", ["pods"], ["get", "list", "watch"])
        | {("", "pods/log", "get")}
    )
    assert not {r for r in rules(role) if r[1] in ("secrets", "persistentvolumeclaims")}
    (binding,) = find(docs, "RoleBinding", "-user")
    (account,) = find(docs, "ServiceAccount", "-user")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": "alchemist-users",
        }
    ]
    # Workers run under an account bound to no Role and without a token.
    (worker,) = find(docs, "ServiceAccount", "-worker")
    assert worker["automountServiceAccountToken"] is False
    bound = {s["name"] for b in find(docs, "RoleBinding") for s in b["subjects"]}
    assert worker["metadata"]["name"] not in bound
    # Nothing cluster-wide is granted to anyone.
    assert not find(docs, "ClusterRole") and not find(docs, "ClusterRoleBinding")


def test_hub_may_manage_user_pods_and_claims_in_the_user_namespace(helm: str) -> None:
    """tenancy.mode shared: the hub's rights are a Role in the one user namespace."""
    docs = render(helm, ALL_ON_SHARED)
    (role,) = find(docs, "Role", "-hub")
    assert role["metadata"]["namespace"] == "alchemist-users"
    assert rules(role) == (
        grid("", ["pods", "persistentvolumeclaims"], ["get", "list", "watch", "create", "delete"])
        | grid("", ["events"], ["get", "list", "watch"])
    )
    (binding,) = find(docs, "RoleBinding", "-hub")
    (hub_deploy,) = find(docs, "Deployment", "-hub")
    assert (
        binding["subjects"][0]["name"]
        == hub_deploy["spec"]["template"]["spec"]["serviceAccountName"]
    )
    assert binding["subjects"][0]["namespace"] == "alchemist"


def test_hub_config_names_the_objects_the_chart_creates(helm: str) -> None:
    """tenancy.mode shared: the ConfigMap's hub config, fed to
    alchemist.hub.kubernetes.configure_hub, points KubeSpawner and the kubernetes
    backend's environment at the very objects the chart renders."""
    docs = render(helm, ALL_ON_SHARED)
    c = Config()
    configure_hub(c, hub_config(docs))
    ks = c.KubeSpawner
    env = backend_environment(hub_config(docs))
    assert ks.environment["ALCHEMIST_K8S_PVC"] == env["ALCHEMIST_K8S_PVC"]
    (user_sa,) = find(docs, "ServiceAccount", "-user")
    (worker_sa,) = find(docs, "ServiceAccount", "-worker")
    (shared,) = [
        p
        for p in find(docs, "PersistentVolumeClaim")
        if p["spec"]["accessModes"] == ["ReadWriteMany"]
    ]
    (queue,) = find(docs, "LocalQueue")
    (hub_svc,) = find(docs, "Service", "-hub")
    (api_svc,) = find(docs, "Service", "-proxy-api")
    assert ks.namespace == env["ALCHEMIST_K8S_NAMESPACE"] == "alchemist-users"
    assert ks.service_account == user_sa["metadata"]["name"]
    assert env["ALCHEMIST_K8S_SERVICE_ACCOUNT"] == worker_sa["metadata"]["name"]
    assert env["ALCHEMIST_K8S_PVC"] == shared["metadata"]["name"]
    assert shared["metadata"]["namespace"] == "alchemist-users"
    assert env["ALCHEMIST_K8S_QUEUE"] == queue["metadata"]["name"]
    assert queue["metadata"]["namespace"] == "alchemist-users"
    assert env["ALCHEMIST_HOME"] == env["ALCHEMIST_K8S_MOUNT_PATH"] == "/mnt/alchemist"
    assert env["ALCHEMIST_BACKEND"] == "kubernetes"
    assert env["ALCHEMIST_K8S_IMAGE"] == "registry.example/alchemist/worker:0.1.0"
    assert json.loads(env["ALCHEMIST_K8S_NODE_SELECTOR"]) == {"pool": "gpu"}
    assert env["ALCHEMIST_K8S_SHM_SIZE"] == "16Gi"
    assert ks.environment["OMP_NUM_THREADS"] == "4"
    assert c.JupyterHub.hub_connect_url == (f"http://{hub_svc['metadata']['name']}.alchemist:8081")
    assert c.ConfigurableHTTPProxy.api_url == (
        f"http://{api_svc['metadata']['name']}.alchemist:8001"
    )
    assert [p["slug"] for p in ks.profile_list] == ["cpu", "gpu-1"]
    # A profile's tolerations add to the hub-wide ones; its node selector is merged
    # by KubeSpawner (a dict).
    gpu = ks.profile_list[1]["kubespawner_override"]
    assert gpu["tolerations"] == [
        {"key": "pool", "operator": "Equal", "value": "notebooks", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert "tolerations" not in ks.profile_list[0]["kubespawner_override"]
    # The database URL is a secret: it travels in the Secret, not in the ConfigMap.
    (cm,) = find(docs, "ConfigMap", "-hub-config")
    assert "postgresql://" not in json.dumps(cm)


def test_hub_config_in_namespaces_mode_points_at_each_users_own_objects(helm: str) -> None:
    """tenancy.mode namespaces (all-on): KubeSpawner puts each user in a namespace of
    their own made from the template, the backend's environment names the objects the
    hub's pre-spawn hook makes there (alchemist.hub.kubernetes.tenancy), the hub's
    ClusterRole is bound to the hub's account, and the chart's ClusterQueue admits
    exactly the namespaces the hub labels."""
    from alchemist.hub.kubernetes import tenancy

    docs = render(helm, (ALL_ON_VALUES,))
    values = hub_config(docs)
    c = Config()
    configure_hub(c, values)
    ks = c.KubeSpawner
    assert ks.enable_user_namespaces is True
    assert ks.user_namespace_template == "ml-{username}"
    assert ks.service_account == tenancy.USER_SERVICE_ACCOUNT
    assert ks.user_namespace_labels == tenancy.namespace_labels("{username}", "alchemist")
    env = ks.environment
    assert env["ALCHEMIST_K8S_NAMESPACE"] == "{namespace}"  # KubeSpawner expands it
    objects = tenancy.user_objects(values, "alice", "ml-alice")
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (home,) = [
        o
        for o in by_kind["PersistentVolumeClaim"]
        if o["metadata"]["name"] == env["ALCHEMIST_K8S_PVC"]
    ]
    assert home["spec"]["accessModes"] == ["ReadWriteMany"]
    assert home["spec"]["storageClassName"] == "nfs-rwx"
    accounts = {o["metadata"]["name"]: o for o in by_kind["ServiceAccount"]}
    assert accounts[env["ALCHEMIST_K8S_SERVICE_ACCOUNT"]]["automountServiceAccountToken"] is False
    (queue,) = by_kind["LocalQueue"]
    assert env["ALCHEMIST_K8S_QUEUE"] == queue["metadata"]["name"]
    (cq,) = find(docs, "ClusterQueue")
    assert queue["spec"]["clusterQueue"] == cq["metadata"]["name"]
    (namespace,) = by_kind["Namespace"]
    wanted = cq["spec"]["namespaceSelector"]["matchLabels"]
    assert wanted.items() <= namespace["metadata"]["labels"].items()
    # The chart makes no user object itself in this mode: no Role, claim or LocalQueue.
    assert not find(docs, "Role") and not find(docs, "LocalQueue")
    assert not find(docs, "PersistentVolumeClaim")  # all-on: the hub's database is a URL
    (binding,) = find(docs, "ClusterRoleBinding")
    (hub_deploy,) = find(docs, "Deployment", "-hub")
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": hub_deploy["spec"]["template"]["spec"]["serviceAccountName"],
            "namespace": "alchemist",
        }
    ]
    # Each user's RoleBinding grants the chart's users' ClusterRole, whose rules are the
    # one list tenancy.USER_RULES; the hub may bind exactly that ClusterRole.
    (users_role,) = find(docs, "ClusterRole", "-user")
    assert rules(users_role) == rules({"rules": USER_RULES})
    (user_binding,) = [o for o in objects if o["kind"] == "RoleBinding"]
    assert user_binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": users_role["metadata"]["name"],
    }
    (hub_role,) = find(docs, "ClusterRole", "-hub")
    (bind_rule,) = [r for r in hub_role["rules"] if "bind" in r["verbs"]]
    assert bind_rule == {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "resourceNames": [users_role["metadata"]["name"]],
        "verbs": ["bind"],
    }
    assert not [r for r in hub_role["rules"] if "escalate" in r["verbs"]]


def test_rendered_jupyterhub_config_runs(helm: str, tmp_path: Path) -> None:
    """The chart's jupyterhub_config.py, run as JupyterHub runs it, configures KubeSpawner
    and then applies hub.extraConfig."""
    docs = render(helm, (ALL_ON_VALUES,))
    (cm,) = find(docs, "ConfigMap", "-hub-config")
    (tmp_path / "hub-config.yaml").write_text(cm["data"]["hub-config.yaml"])
    # Mounted beside hub-config.yaml in the pod, as the ConfigMap's other keys are.
    (tmp_path / "extra_config.py").write_text(cm["data"]["extra_config.py"])
    source = cm["data"]["jupyterhub_config.py"].replace(
        "/usr/local/etc/alchemist/hub-config.yaml", str(tmp_path / "hub-config.yaml")
    )
    c = Config()
    exec(compile(source, "jupyterhub_config.py", "exec"), {"c": c})
    assert c.JupyterHub.spawner_class == "kubespawner.KubeSpawner"
    assert c.JupyterHub.authenticator_class == "alchemist.hub.kubernetes.auth.ClusterAuthenticator"
    assert c.JupyterHub.shutdown_on_logout is True
    assert c.KubeSpawner.extra_annotations == {"alchemist.dev/extra-config": "applied"}


def secret_data(docs: list[dict[str, Any]]) -> dict[str, str]:
    (secret,) = find(docs, "Secret", "-hub-secret")
    return dict(secret["data"])


def test_secrets_are_generated_at_install_not_committed(helm: str) -> None:
    first, second = secret_data(render_uncached(helm)), secret_data(render_uncached(helm))
    for key in ["cookie-secret", "proxy-token"]:
        assert len(first[key]) >= 64
        assert first[key] != second[key]
    given = secret_data(render(helm, sets=["hub.cookieSecret=abc123"]))
    assert given["cookie-secret"] == "YWJjMTIz"  # base64 of abc123


def test_default_profiles_are_cpu_and_1_4_8_gpus(helm: str) -> None:
    c = Config()
    configure_hub(c, hub_config(render(helm)))
    offered = {
        p["slug"]: p["kubespawner_override"].get("extra_resource_limits", {})
        for p in c.KubeSpawner.profile_list
    }
    assert offered == {
        "cpu": {},
        "gpu-1": {"nvidia.com/gpu": "1"},
        "gpu-4": {"nvidia.com/gpu": "4"},
        "gpu-8": {"nvidia.com/gpu": "8"},
    }


def test_chart_and_python_defaults_agree(helm: str) -> None:
    """alchemist.hub.kubernetes.DEFAULT_PROFILES (used when a config sets no profiles) matches the
    chart's default profiles."""
    from alchemist.hub.kubernetes import DEFAULT_PROFILES, make_profile_list, profile_from_values

    chart = hub_config(render(helm))["singleuser"]["profiles"]
    assert make_profile_list([profile_from_values(p) for p in chart]) == make_profile_list(
        list(DEFAULT_PROFILES)
    )


def test_templates_write_no_registry_hostname() -> None:
    """Images default to names without a registry host (the admin sets the registry)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for image in [
        values["hub"]["image"],
        values["singleuser"]["image"],
        values["singleuser"]["workerImage"],
    ]:
        assert not re.match(r"^[a-z0-9-]+(\.[a-z0-9-]+)+/", image["repository"])


def test_hub_configmap_carries_the_charts_jupyterhub_config_file(helm: str) -> None:
    """The hub runs the chart's real files/hub/jupyterhub_config.py, byte for byte (the
    zero-to-jupyterhub way), and hub.extraConfig travels beside it, not inside it."""
    chart_file = CHART / "files" / "hub" / "jupyterhub_config.py"
    (cm,) = find(render(helm), "ConfigMap", "-hub-config")
    assert cm["data"]["jupyterhub_config.py"] == chart_file.read_text()
    assert "extra_config.py" not in cm["data"]
    (cm,) = find(render(helm, (ALL_ON_VALUES,)), "ConfigMap", "-hub-config")
    assert "alchemist.dev/extra-config" in cm["data"]["extra_config.py"]
    assert "alchemist.dev/extra-config" not in cm["data"]["jupyterhub_config.py"]
