"""k8s/: the manifests are valid Kubernetes objects and agree with each other, the image and the code.

Schemas are those bundled by kubernetes-validate (offline). Nothing here needs a cluster; what a cluster would refuse
(an unknown field, a selector that matches no pod) or silently get wrong (a probe on a route that does not exist, an
HPA on a metric Herald does not export) is checked here instead.
"""

import re
from pathlib import Path

import httpx
import kubernetes_validate
import pytest
import yaml
from fastapi.testclient import TestClient

from herald_service.api.app import build_app
from herald_service.config import Settings
from herald_service.metrics import HeraldMetrics
from conftest import free_port, serving, wait_ready

ROOT = Path(__file__).parents[1]
K8S = ROOT / "k8s"
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.latest_version())
"""The oldest version the manifests' APIs are checked against (autoscaling/v2 and policy/v1 are GA from 1.23 and 1.21)
and the newest schema kubernetes-validate bundles."""


def documents(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((K8S / name).read_text(encoding="utf-8")) if doc]


def resources() -> dict[str, dict]:
    """The kustomization's resources by kind (one object of each kind)."""
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]
    objects = [doc for name in listed for doc in documents(name)]
    by_kind = {doc["kind"]: doc for doc in objects}
    assert len(by_kind) == len(objects)
    return by_kind


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict]:
    return resources()


@pytest.fixture(scope="module")
def container(k8s) -> dict:
    (only,) = k8s["Deployment"]["spec"]["template"]["spec"]["containers"]
    return only


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_a_valid_object_with_no_unknown_field(version):
    names = ["secret.example.yaml", *yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))["resources"]]
    for name in names:
        for doc in documents(name):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_refuses_a_misspelt_field(container):
    broken = resources()["Deployment"]
    broken["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/health/ready"
    with pytest.raises(kubernetes_validate.ValidationError, match="paht"):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)


def test_every_yaml_file_in_k8s_is_applied_or_said_not_to_be():
    # README: kustomization.yaml takes everything except the Secret example and the prometheus-adapter Helm values.
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))["resources"])
    present = {path.name for path in K8S.glob("*.yaml")}
    assert present - listed == {"kustomization.yaml", "secret.example.yaml", "prometheus-adapter-values.yaml"}


def test_the_selectors_match_the_pods(k8s):
    pod_labels = k8s["Deployment"]["spec"]["template"]["metadata"]["labels"]
    # matchLabels only: a matchExpressions term would need its own check (re-tester)
    assert set(k8s["Deployment"]["spec"]["selector"]) == set(k8s["PodDisruptionBudget"]["spec"]["selector"]) == {"matchLabels"}
    for selector in (k8s["Deployment"]["spec"]["selector"]["matchLabels"], k8s["Service"]["spec"]["selector"],
                     k8s["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]):
        assert selector and selector.items() <= pod_labels.items()
    target = k8s["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", k8s["Deployment"]["metadata"]["name"])


def test_the_service_the_scrape_annotations_the_probes_and_the_config_name_their_ports(k8s, container):
    # the API on HERALD_PORT behind the Service; probes and scrapes on HERALD_HEALTH_PORT, outside
    # HERALD_MAX_CONNECTIONS: on the API's port a flood holding that bound failed the liveness probe, and the kubelet
    # restarted a healthy pod after 30 s (tester)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    data = k8s["ConfigMap"]["data"]
    assert ports == {"http": int(data["HERALD_PORT"]), "health": int(data["HERALD_HEALTH_PORT"])}
    (service_port,) = k8s["Service"]["spec"]["ports"]
    assert service_port["targetPort"] == "http"
    annotations = k8s["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == ports["health"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["port"] == "health", probe


def test_each_probe_asks_its_own_question_and_answers_on_the_real_app_with_keys_set(k8s, container):
    # Readiness and start-up wait on the model (ready), liveness only on the process (live): swapped, traffic would
    # reach loading pods and liveness would restart them while they load (re-tester: a set of paths passed that).
    # A probe on a path the app does not serve fails every pod; a scrape path that 404s hides every metric; the
    # Deployment requires HERALD_API_KEYS, and kubelet and Prometheus send no key.
    paths = {probe: container[probe]["httpGet"]["path"] for probe in ("startupProbe", "readinessProbe", "livenessProbe")}
    assert paths == {"startupProbe": "/health/ready", "readinessProbe": "/health/ready", "livenessProbe": "/health/live"}
    scrape = k8s["Deployment"]["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"]
    assert scrape == "/metrics"
    settings = Settings(_env_file=None, fake_backend=True, api_keys="client-key-0123456789")
    with TestClient(build_app(settings)) as client:
        wait_ready(client)
        for path in sorted({*paths.values(), scrape}):
            assert client.get(path).status_code == 200, path
        assert client.post("/classify", json={"input": "hi"}).status_code == 401  # the keys are on
    # and on a real server's health port, where the probes and the scrape go (free ports stand in for the ConfigMap's)
    port, health_port = free_port(), free_port()
    settings = Settings(_env_file=None, fake_backend=True, warmup=False, api_keys="client-key-0123456789", port=port,
                        health_port=health_port)
    with serving(build_app(settings), port=port, health_port=health_port):
        for path in sorted({*paths.values(), scrape}):
            assert httpx.get(f"http://127.0.0.1:{health_port}{path}", timeout=5).status_code == 200, path


def test_the_configmap_is_one_valid_set_of_settings(k8s):
    # Each value was checked alone (test_config.py); limits that conflict with each other passed (re-tester).
    data = k8s["ConfigMap"]["data"]
    settings = Settings(_env_file=None, **{name.removeprefix("HERALD_").lower(): value for name, value in data.items()})
    assert settings.port == 8000 and settings.host == "0.0.0.0" and settings.health_port == 8001


def test_the_kustomization_sets_the_image_the_deployment_names(k8s, container):
    # images[].name must be the Deployment's image name, or the override silently does not apply (re-tester)
    (image,) = yaml.safe_load((K8S / "kustomization.yaml").read_text(encoding="utf-8"))["images"]
    assert container["image"].split(":")[0] == image["name"]


def test_the_environment_names_the_configmap_and_the_secret_keys_settings_reads(k8s, container):
    (source,) = container["envFrom"]
    assert source["configMapRef"]["name"] == k8s["ConfigMap"]["metadata"]["name"]
    (secret,) = documents("secret.example.yaml")
    refs = {env["name"]: env["valueFrom"]["secretKeyRef"] for env in container["env"]}
    assert {ref["name"] for ref in refs.values()} == {secret["metadata"]["name"]}
    assert all(name == ref["key"] for name, ref in refs.items())
    settings = {f"HERALD_{field.upper()}" for field in Settings.model_fields}
    assert set(refs) <= settings and not set(refs) & set(k8s["ConfigMap"]["data"])
    required = {name for name, ref in refs.items() if not ref.get("optional", False)}
    assert required == {"HERALD_API_KEYS"} and required <= set(secret["stringData"])


def test_the_hpa_and_the_adapter_ask_for_gauges_herald_exports(k8s, container):
    exported = {metric.name for metric in HeraldMetrics().registry.collect() if metric.type == "gauge"}
    metrics = k8s["HorizontalPodAutoscaler"]["spec"]["metrics"]
    assert {m["type"] for m in metrics} == {"Pods", "Resource"}  # another type would need its own check
    wanted = [m["pods"]["metric"]["name"] for m in metrics if m["type"] == "Pods"]
    assert wanted and set(wanted) <= exported
    # a Utilization target is a share of the container's request: without one the HPA cannot compute it
    for metric in (m["resource"] for m in metrics if m["type"] == "Resource"):
        assert metric["target"]["type"] == "Utilization" and metric["name"] in container["resources"]["requests"]
    adapter = yaml.safe_load((K8S / "prometheus-adapter-values.yaml").read_text(encoding="utf-8"))
    served = {rule["name"]["as"] for rule in adapter["rules"]["custom"]}
    assert set(wanted) <= served
    for rule in adapter["rules"]["custom"]:
        (series,) = re.findall(r"^(\w+)\{", rule["seriesQuery"])
        assert series in exported and re.fullmatch(rule["name"]["matches"], series), rule


def test_the_pod_runs_as_the_images_user():
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    (uid,) = re.findall(r"useradd .*--uid (\d+)", dockerfile)
    (gid,) = re.findall(r"groupadd .*--gid (\d+)", dockerfile)
    assert re.search(rf"^USER {uid}:{gid}$", dockerfile, re.MULTILINE)
    security = resources()["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert (security["runAsUser"], security["runAsGroup"]) == (int(uid), int(gid))


def test_the_grace_period_outlasts_a_request_and_the_pre_stop_sleep(k8s, container):
    # In-flight requests finish only if Kubernetes waits longer than the preStop sleep plus a request's deadline.
    pod = k8s["Deployment"]["spec"]["template"]["spec"]
    command = container["lifecycle"]["preStop"]["exec"]["command"]
    assert command[0] == "sleep"
    timeout_s = Settings(_env_file=None, **{"request_timeout_s": k8s["ConfigMap"]["data"]["HERALD_REQUEST_TIMEOUT_S"]}).request_timeout_s
    assert pod["terminationGracePeriodSeconds"] > timeout_s + float(command[1])


def test_the_thread_count_equals_the_cpu_limit(k8s, container):
    # k8s/README.md: keep HERALD_NUM_THREADS equal to the pod's CPU count (more threads than CPUs only contend).
    limits = container["resources"]["limits"]
    assert int(k8s["ConfigMap"]["data"]["HERALD_NUM_THREADS"]) == int(limits["cpu"]) == int(container["resources"]["requests"]["cpu"])


def test_the_image_exposes_the_api_port_and_the_health_port_compose_and_k8s_set():
    # tester nit: EXPOSE listed 8000 only while docker-compose.yml and the ConfigMap serve probes and /metrics on 8001
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    (exposed,) = re.findall(r"^EXPOSE (.+)$", dockerfile, re.MULTILINE)
    compose = yaml.safe_load((ROOT / "docker" / "docker-compose.yml").read_text(encoding="utf-8"))
    health = {compose["services"]["herald"]["environment"]["HERALD_HEALTH_PORT"],
              resources()["ConfigMap"]["data"]["HERALD_HEALTH_PORT"]}
    assert exposed.split() == ["8000", *sorted(health)] == ["8000", "8001"]


def test_the_docs_say_the_read_only_root_loads_only_the_baked_backbone():
    # tester nit: with readOnlyRootFilesystem and HERALD_CACHE_DIR=/opt/herald-cache, another GGUF cannot be converted
    container = resources()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert resources()["ConfigMap"]["data"]["HERALD_CACHE_DIR"] == "/opt/herald-cache"
    readme = " ".join((K8S / "README.md").read_text(encoding="utf-8").split())
    assert "So the pods load only that backbone: another GGUF in `HERALD_BACKBONE` cannot be converted at run time" in readme
    assert 'HERALD_CACHE_DIR: "/var/cache/herald"' in readme and "emptyDir:" in readme
