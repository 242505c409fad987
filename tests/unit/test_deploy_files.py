"""The deploy files (deploy/docker-compose.yml, deploy/k8s/*.yaml, deploy/Dockerfile) read as the
tools that run them would: Kafka's cluster id is a UUID, the Qdrant server is a version the pinned
client speaks to, compose and Kubernetes run the same backing images, and every ORGMEM_ variable
they set is a field of `services.settings.Settings` with a value it accepts (pydantic-settings
ignores unknown names, so a misspelt one would silently do nothing)."""

from __future__ import annotations

import base64
import re
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from services.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def k8s_documents() -> list[dict]:
    return [doc for path in sorted((DEPLOY / "k8s").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def k8s_containers() -> list[dict]:
    return [c for doc in k8s_documents() if doc["kind"] in ("Deployment", "StatefulSet")
            for c in doc["spec"]["template"]["spec"]["containers"]]


def container_env(container: dict) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e}


def images() -> dict[str, dict[str, str]]:
    """Repository -> tag, per tool."""
    def split(image: str) -> tuple[str, str]:
        repo, _, tag = image.rpartition(":")
        return repo, tag

    return {"compose": dict(split(s["image"]) for s in compose()["services"].values() if "image" in s),
            "k8s": dict(split(c["image"]) for c in k8s_containers())}


def dockerfile_env() -> dict[str, str]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(dict(pair.split("=", 1) for pair in line[4:].split()))
    return env


def orgmem_envs() -> dict[str, dict[str, str]]:
    """Every set of ORGMEM_ variables one process gets, named by where it comes from."""
    sets: dict[str, dict[str, str]] = {}
    base = dockerfile_env()
    config = next(doc["data"] for doc in k8s_documents() if doc["kind"] == "ConfigMap")
    for container in k8s_containers():
        if container["image"].startswith("orgmem"):
            sets[f"k8s {container['name']}"] = {**base, **config, **container_env(container)}
    for name, service in compose()["services"].items():
        if service.get("image", "").startswith("orgmem"):
            sets[f"compose {name}"] = {**base, **{k: str(v) for k, v in service["environment"].items()}}
    assert len(sets) >= 8, sets.keys()  # 4 processes in each tool
    return {where: {k: v for k, v in env.items() if k.startswith("ORGMEM_")} for where, env in sets.items()}


def kafka_cluster_ids() -> dict[str, str]:
    found = {"compose": compose()["services"]["kafka"]["environment"].get("CLUSTER_ID")}
    kafka = [c for c in k8s_containers() if c["name"] == "kafka"]
    found["k8s"] = container_env(kafka[0]).get("CLUSTER_ID")
    return found


def uuid_bytes(cluster_id: str) -> bytes:
    """As Kafka's Uuid.fromString reads it: base64url without padding, 16 bytes."""
    if not re.fullmatch(r"[A-Za-z0-9_-]{22}", cluster_id):
        raise ValueError(f"{cluster_id!r}: not 22 base64url characters")
    return base64.urlsafe_b64decode(cluster_id + "==")


def test_kafka_cluster_ids_are_uuids_in_base64url():
    for where, cluster_id in kafka_cluster_ids().items():
        assert cluster_id, f"{where}: Kafka needs CLUSTER_ID to format its KRaft storage"
        assert len(uuid_bytes(cluster_id)) == 16, where
        assert uuid_bytes(cluster_id) != bytes(16), f"{where}: the zero UUID is reserved"


def test_the_uuid_check_refuses_what_kafka_refuses():
    with pytest.raises(ValueError):
        uuid_bytes("b3JnbWVtLWthZmthLTAw")  # the earlier id: 20 characters, 15 bytes ("orgmem-kafka-00")
    with pytest.raises(ValueError):
        uuid_bytes("mOfaOlSXQFWC3ep50c6q1Q==")  # padded
    assert len(uuid_bytes("mOfaOlSXQFWC3ep50c6q1Q")) == 16


def minor(text: str) -> tuple[int, int]:
    major, minor_ = re.match(r"v?(\d+)\.(\d+)", text).groups()
    return int(major), int(minor_)


def test_qdrant_server_and_client_are_within_one_minor_version():
    servers = {where: tags["qdrant/qdrant"] for where, tags in images().items()}
    pin = re.search(r'"qdrant-client~=(\d+\.\d+)\.\d+"', (DEPLOY / "Dockerfile").read_text())
    assert pin, "deploy/Dockerfile must pin qdrant-client to one minor version (~=X.Y.0)"
    clients = {"installed": version("qdrant-client"), "Dockerfile": pin.group(1)}
    for where, tag in servers.items():
        server = minor(tag)
        for which, client in clients.items():
            # qdrant-client's own rule (common/version_check.py): same major, minors at most one apart.
            assert server[0] == minor(client)[0] and abs(server[1] - minor(client)[1]) <= 1, \
                f"{where} runs Qdrant {tag}; qdrant-client {client} ({which}) needs a server within one minor version"


def test_compose_and_kubernetes_run_the_same_backing_images():
    tools = images()
    for repo in ("apache/kafka", "docker.elastic.co/elasticsearch/elasticsearch", "qdrant/qdrant", "redis"):
        assert tools["compose"][repo] == tools["k8s"][repo], repo


def settings_field(name: str) -> bool:
    """Whether ORGMEM_A__B names a field path of Settings (names are case-insensitive)."""
    model: type[BaseModel] | None = Settings
    for part in name.removeprefix("ORGMEM_").lower().split("__"):
        if model is None or part not in model.model_fields:
            return False
        annotation = model.model_fields[part].annotation
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    return True


def test_the_field_check_refuses_misspelt_names():
    assert settings_field("ORGMEM_CLUSTER__REDIS_URL") and settings_field("ORGMEM_PROFILE")
    for wrong in ("ORGMEM_CLUSTER_REDIS_URL", "ORGMEM_CLUSTER__REDIS", "ORGMEM_PROFILE__X", "ORGMEM_INDEXER__BATCH"):
        assert not settings_field(wrong), wrong


def test_every_orgmem_variable_of_the_deploy_files_is_a_setting_it_accepts(monkeypatch):
    for where, env in orgmem_envs().items():
        unknown = sorted(name for name in env if not settings_field(name))
        assert not unknown, f"{where}: not fields of services.settings.Settings: {unknown}"
        with monkeypatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            settings = Settings()
        assert settings.profile == "cluster", where
        assert settings.cluster.kafka_bootstrap and settings.cluster.es_url and settings.cluster.qdrant_url, where
        assert settings.cluster.redis_url.startswith("redis://") and "127.0.0.1" not in settings.cluster.redis_url, where
