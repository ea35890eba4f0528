"""deploy/kubernetes/: each overlay rendered, checked against Kubernetes' schemas and against tierd.

Rendered as ``kustomize build`` does (``tests.fixtures.kustomize``), with the secrets an operator
makes first (docs/operations.md, "Kubernetes"). Every object of a built-in kind validates
strictly (no unknown field) against the schemas of the oldest and newest Kubernetes
``kubernetes-validate`` ships, offline. Then against the daemon itself: the ConfigMap's config
loads with tierd's own loader, in the environment the DaemonSet gives it; the probes', the
Service's and the PodMonitor's port is the one the config listens on and their paths are the
app's routes that need no token; every path the config names is mounted (the root file system
is read-only); the security context is the image's user, or root with exactly the documented
capabilities; the drain fits in the grace period.
"""

from __future__ import annotations

import base64
import re
import secrets
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.fixtures.docker import KEEP_OWNERS_CAPABILITIES, REPO
from tests.fixtures.kustomize import render
from tierd.api.app import create_app
from tierd.api.gate import PUBLIC_PATHS
from tierd.config import Config, PosixTier, load_config
from tierd.daemon.catalog.db import Database
from tierd.daemon.context import Context

Obj = dict[str, Any]

DEPLOY = REPO / "deploy" / "kubernetes"
OVERLAYS = ["base", "overlays/sqlite-single", "overlays/postgres-fleet"]
#: Which overlays run as root with KEEP_OWNERS_CAPABILITIES (the others as the image's user).
AS_ROOT = {"overlays/postgres-fleet"}
KUBERNETES_VERSIONS = ("1.25", kubernetes_validate.latest_version())
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
#: What ``spec.nodeName`` stands for while the config is loaded here.
NODE_NAME = "gpu-node-017"
CATALOG_URL = "postgresql+psycopg://tierd:pw@postgres.db.svc:5432/tierd"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Obj]]:
    """Each overlay's objects, from a copy holding the secrets the docs tell an operator to make."""
    root = tmp_path_factory.mktemp("kubernetes") / "kubernetes"
    shutil.copytree(DEPLOY, root)
    (root / "base" / "tokens").mkdir()
    for name in ("admin", "operate"):
        (root / "base" / "tokens" / name).write_text(secrets.token_hex(32) + "\n")
    fleet = root / "overlays" / "postgres-fleet"
    (fleet / "catalog.env").write_text(f"TIERD_CATALOG__URL={CATALOG_URL}\n")
    (fleet / "s3.env").write_text("AWS_ACCESS_KEY_ID=AKIAEXAMPLE\nAWS_SECRET_ACCESS_KEY=example\n")
    return {overlay: render(root / overlay) for overlay in OVERLAYS}


def _one(objects: list[Obj], kind: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"{len(found)} objects of kind {kind}"
    return found[0]


def _pod(objects: list[Obj]) -> Obj:
    pod: Obj = _one(objects, "DaemonSet")["spec"]["template"]["spec"]
    return pod


def _tierd(objects: list[Obj]) -> Obj:
    container: Obj = next(c for c in _pod(objects)["containers"] if c["name"] == "tierd")
    return container


def _named(objects: list[Obj], kind: str, name: str) -> Obj:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def _environment(objects: list[Obj]) -> dict[str, str]:
    """The tierd container's environment, ``spec.nodeName`` as NODE_NAME, secrets decoded."""
    env: dict[str, str] = {}
    container = _tierd(objects)
    for source in container.get("envFrom", []):
        secret = _named(objects, "Secret", source["secretRef"]["name"])
        env |= {key: base64.b64decode(value).decode() for key, value in secret["data"].items()}
    for item in container.get("env", []):
        field = item.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        env[item["name"]] = NODE_NAME if field == "spec.nodeName" else item["value"]
    return env


def _mount_of(objects: list[Obj], path: PurePosixPath | Path) -> tuple[Obj, Obj]:
    """The container's volume mount holding ``path`` (the deepest), and its volume."""
    holding = [
        m for m in _tierd(objects)["volumeMounts"] if PurePosixPath(path).is_relative_to(m["mountPath"])
    ]
    assert holding, f"{path} is on no volume: the root file system is read-only"
    mount = max(holding, key=lambda m: len(m["mountPath"]))
    return mount, next(v for v in _pod(objects)["volumes"] if v["name"] == mount["name"])


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def loaded(
    overlay: str, rendered: dict[str, list[Obj]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Obj], Config]:
    """The overlay's objects and its ConfigMap's config, read by tierd's loader in the pod's env."""
    objects = rendered[overlay]
    env = _environment(objects)
    config_path = PurePosixPath(env["TIERD_CONFIG"])
    _, volume = _mount_of(objects, config_path)
    config_map = _named(objects, "ConfigMap", volume["configMap"]["name"])
    (tmp_path / config_path.name).write_text(config_map["data"][config_path.name])
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return objects, load_config(tmp_path / config_path.name)


def test_every_object_validates_against_the_kubernetes_schemas(
    overlay: str, rendered: dict[str, list[Obj]]
) -> None:
    for obj in rendered[overlay]:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue  # the Prometheus Operator's: checked by the tests below
        for version in KUBERNETES_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(p) for p in exc.absolute_path)
                pytest.fail(
                    f"{overlay}: {obj['kind']} {obj['metadata']['name']} ({version}): {where}: {exc.message}"
                )


def test_the_config_is_one_tierd_loads_with_the_node_named_by_kubernetes(
    overlay: str, loaded: tuple[list[Obj], Config]
) -> None:
    objects, config = loaded
    node = next(e for e in _tierd(objects)["env"] if e["name"] == "TIERD_NODE")
    assert node["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert config.node == NODE_NAME
    if overlay in AS_ROOT:
        assert config.catalog.url == CATALOG_URL  # from the Secret, over the file's
        assert [t.shared for t in config.tiers] == [False, True, True]


def _port(objects: list[Obj], port: int | str) -> int:
    if isinstance(port, int):
        return port
    return int(next(p["containerPort"] for p in _tierd(objects)["ports"] if p["name"] == port))


def test_probes_service_and_scrape_reach_the_daemons_port_and_public_routes(
    loaded: tuple[list[Obj], Config], tmp_path: Path
) -> None:
    objects, config = loaded
    container = _tierd(objects)
    untokened = config.model_copy(update={"api": config.api.model_copy(update={"tokens": []})})
    app = create_app(Context(config=untokened, db=Database("sqlite://")))  # its token files are the pod's
    routes = set(app.openapi()["paths"])
    kinds = ("startupProbe", "livenessProbe", "readinessProbe")
    probes = {name: container[name]["httpGet"] for name in kinds}
    assert {name: get["path"] for name, get in probes.items()} == {
        "startupProbe": "/livez",
        "livenessProbe": "/livez",
        "readinessProbe": "/readyz",
    }
    scrape = _one(objects, "PodMonitor")["spec"]["podMetricsEndpoints"]
    for path in [get["path"] for get in probes.values()] + [e["path"] for e in scrape]:
        assert path in routes, path
        assert path in PUBLIC_PATHS, f"{path} needs a token: a probe or a scrape carries none"
    assert config.api.host == "0.0.0.0"
    ports = [_port(objects, get["port"]) for get in probes.values()]
    ports += [_port(objects, e["port"]) for e in scrape]
    ports += [_port(objects, p["targetPort"]) for p in _one(objects, "Service")["spec"]["ports"]]
    assert set(ports) == {config.api.port}
    labels = _one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert _one(objects, "Service")["spec"]["selector"].items() <= labels.items()
    assert _one(objects, "PodMonitor")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(rf"http://127\.0\.0\.1:{config.api.port}/livez", dockerfile), "the image's HEALTHCHECK"
    assert re.search(rf"^EXPOSE {config.api.port}$", dockerfile, re.MULTILINE)


def test_every_path_the_config_names_is_mounted_and_writable_where_written(
    loaded: tuple[list[Obj], Config],
) -> None:
    objects, config = loaded
    for tier in config.tiers:
        if isinstance(tier, PosixTier):
            mount, volume = _mount_of(objects, tier.path)
            assert not mount.get("readOnly"), tier.name
            assert "hostPath" in volume, f"tier {tier.name}: on the node, not in the pod"
    for watch in config.watch:
        _mount_of(objects, watch.path)
    if config.catalog.url.startswith("sqlite:///"):
        catalog = PurePosixPath(config.catalog.url.removeprefix("sqlite:///"))
        mount, volume = _mount_of(objects, catalog.parent)
        assert not mount.get("readOnly")
        assert "hostPath" in volume, "the SQLite catalog would not outlive the pod"
    for token in config.api.tokens:
        assert token.token_file is not None, f"api.tokens {token.name}: inline, not from the Secret"
        mount, volume = _mount_of(objects, token.token_file)
        secret = _named(objects, "Secret", volume["secret"]["secretName"])
        assert str(token.token_file.relative_to(mount["mountPath"])) in secret["data"]


def _dockerfile_user() -> int:
    found = re.search(r"^USER (\d+):(\d+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert found is not None
    return int(found[1])


def test_the_security_context_is_the_images_user_or_root_with_the_documented_capabilities(
    overlay: str, rendered: dict[str, list[Obj]]
) -> None:
    objects = rendered[overlay]
    pod, container = _pod(objects)["securityContext"], _tierd(objects)["securityContext"]
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"]["drop"] == ["ALL"]
    if overlay in AS_ROOT:
        assert (pod["runAsUser"], pod["runAsNonRoot"]) == (0, False)
        assert tuple(container["capabilities"]["add"]) == KEEP_OWNERS_CAPABILITIES
    else:
        assert (pod["runAsUser"], pod["runAsNonRoot"]) == (_dockerfile_user(), True)
        assert "add" not in container["capabilities"]  # a non-root process would not get them
    for capability in KEEP_OWNERS_CAPABILITIES:
        assert f"CAP_{capability}" in (REPO / "docs" / "operations.md").read_text()


def test_the_drain_ends_within_the_grace_period(loaded: tuple[list[Obj], Config]) -> None:
    objects, config = loaded
    grace = _pod(objects)["terminationGracePeriodSeconds"]
    assert config.drain_timeout_seconds + 10 <= grace  # the drain, then the interpreter's exit


def test_the_prometheus_rule_holds_the_rules_file(rendered: dict[str, list[Obj]]) -> None:
    """The PrometheusRule is deploy/prometheus/tierd.rules.yml for the Prometheus Operator."""
    rule = _one(rendered["base"], "PrometheusRule")
    rules_file = REPO / "deploy" / "prometheus" / "tierd.rules.yml"
    groups = yaml.safe_load(rules_file.read_text())["groups"] if rules_file.exists() else []
    assert rule["spec"]["groups"] == groups, (
        "copy the groups of deploy/prometheus/tierd.rules.yml into deploy/kubernetes/base/prometheusrule.yaml"
    )


def test_the_renderer_hashes_a_generated_name_as_kustomize_does(tmp_path: Path) -> None:
    """The suffix kustomize v5.5.0 (kubectl 1.32) gives this ConfigMap: cm-42cfbf598f."""
    (tmp_path / "kustomization.yaml").write_text(
        "configMapGenerator:\n  - name: cm\n    literals: [FOO=Bar]\n"
    )
    assert [o["metadata"]["name"] for o in render(tmp_path)] == ["cm-42cfbf598f"]
