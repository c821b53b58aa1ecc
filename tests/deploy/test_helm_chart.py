"""deploy/helm/execauth: rendered by Helm's own engine, checked against Kubernetes' schemas.

No cluster runs here, so the chart is rendered with ``helm-python-sdk`` (Helm's Go SDK
behind a C ABI, from PyPI: docs/decisions.md) and every manifest is validated with
``kubernetes-validate`` for the oldest Kubernetes the chart supports and the newest the
validator knows. The tests then read the manifests for what docs/deploy.md promises.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "execauth"
ISSUER = {"config": {"issuer": "https://execauth.example.com"}}
KUBERNETES_VERSIONS = ["1.25", kubernetes_validate.utils.latest_version()]

Manifest = dict[str, Any]


def render(values: dict[str, Any] | None = None) -> list[Manifest]:
    """The chart's manifests for ``values`` (merged over values.yaml), hooks included."""
    with helm.Chart.load(str(CHART)) as chart:
        rendered = chart.render(
            ISSUER if values is None else values, name="execauth", namespace="prod"
        )
    manifests: list[Manifest] = []
    for template, text in sorted(rendered.items()):
        if template.endswith(".txt"):
            continue
        manifests += [doc for doc in yaml.safe_load_all(text) if doc]
    return manifests


def one(manifests: list[Manifest], kind: str) -> Manifest:
    (found,) = [m for m in manifests if m["kind"] == kind]
    return found


def pod_specs(manifests: list[Manifest]) -> list[Manifest]:
    return [m["spec"]["template"]["spec"] for m in manifests if m["kind"] in ("Deployment", "Job")]


def env_of(container: Manifest) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container.get("env", [])}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "values",
    [ISSUER, ISSUER | {"autoscaling": {"enabled": True}}],
    ids=["fixed-replicas", "autoscaling"],
)
def test_every_rendered_manifest_is_valid_kubernetes(values: dict[str, Any], version: str) -> None:
    manifests = render(values)
    assert manifests
    for manifest in manifests:
        kubernetes_validate.validate(manifest, version, strict=True)


def test_the_chart_renders_the_documented_kinds() -> None:
    kinds = sorted(m["kind"] for m in render(ISSUER | {"autoscaling": {"enabled": True}}))
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "Job",
        "PodDisruptionBudget",
        "Service",
    ]


def test_the_chart_refuses_to_render_without_a_public_issuer() -> None:
    with pytest.raises(helm.HelmError, match=r"config\.issuer"):
        render({})


def test_the_issuer_is_the_configured_public_url_on_every_pod() -> None:
    config = one(render(), "ConfigMap")
    assert config["data"]["EXECAUTH_ISSUER"] == "https://execauth.example.com"


def test_pods_run_as_non_root_on_a_read_only_root_filesystem() -> None:
    for spec in pod_specs(render()):
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001  # the image's USER
        for container in spec["containers"]:
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
            assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"] for m in container["volumeMounts"]}
            assert "/tmp" in mounts  # serve --workers keeps its socket and metrics there


def test_probes_use_healthz_for_liveness_and_readyz_for_readiness() -> None:
    (container,) = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_secrets_are_mounted_where_the_secrets_dir_points_not_put_in_the_environment() -> None:
    for spec in pod_specs(render({**ISSUER, "existingSecret": "prod-execauth"})):
        (container,) = spec["containers"]
        (secret,) = [v for v in spec["volumes"] if "secret" in v]
        assert secret["secret"]["secretName"] == "prod-execauth"
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == secret["name"]]
        assert env_of(container)["EXECAUTH_SECRETS_DIR"] == mount["mountPath"]
        assert not any("secretKeyRef" in str(item) for item in container.get("env", []))


def test_replicas_do_not_migrate_and_a_pre_upgrade_job_runs_db_upgrade() -> None:
    manifests = render()
    (server,) = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert env_of(server)["EXECAUTH_MIGRATE_ON_START"] == "false"
    job = one(manifests, "Job")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    (migrate,) = job["spec"]["template"]["spec"]["containers"]
    assert migrate["args"] == ["db", "upgrade"]
    assert migrate["image"] == server["image"]


def test_a_rolling_update_never_has_fewer_ready_pods_than_asked_for() -> None:
    deployment = one(render(), "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert deployment["spec"]["replicas"] == 3


def test_with_autoscaling_the_hpa_owns_the_replica_count() -> None:
    manifests = render(ISSUER | {"autoscaling": {"enabled": True}})
    assert "replicas" not in one(manifests, "Deployment")["spec"]
    hpa = one(manifests, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == one(manifests, "Deployment")["metadata"]["name"]


def test_the_optional_service_monitor_scrapes_metrics_on_the_http_port() -> None:
    assert not [m for m in render() if m["kind"] == "ServiceMonitor"]
    monitor = one(render(ISSUER | {"serviceMonitor": {"enabled": True}}), "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]


def test_a_changed_setting_changes_the_pods_template() -> None:
    def checksum(values: dict[str, Any]) -> str:
        template = one(render(values), "Deployment")["spec"]["template"]
        value: str = template["metadata"]["annotations"]["checksum/config"]
        return value

    assert checksum(ISSUER) != checksum({"config": {"issuer": "https://other.example.com"}})


def test_every_value_is_documented_in_the_charts_readme() -> None:
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([A-Za-z0-9_.]+)` \|", readme, re.M))

    def leaves(values: dict[str, Any], prefix: str = "") -> set[str]:
        names: set[str] = set()
        for key, value in values.items():
            if isinstance(value, dict) and value and key not in ("resources", "extra"):
                names |= leaves(value, f"{prefix}{key}.")
            else:
                names.add(prefix + key)
        return names

    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert leaves(values) - documented == set()
