"""The cluster profile's shared-folder stores (`cluster.stores = "shared-folder"`): what it needs,
and the rebuild it refuses. The processes themselves run in tests/integration/test_cluster_processes.py."""

from __future__ import annotations

import pytest

from services.bootstrap import build_cluster_memory, rebuild_cluster_beside
from services.errors import Invalid
from services.settings import Settings


def shared(tmp_path, **cluster) -> Settings:
    return Settings(profile="cluster", data_dir=tmp_path / "data",
                    cluster={"stores": "shared-folder", "shared_dir": tmp_path / "shared", **cluster})


def test_shared_folder_needs_kafka_and_qdrant_but_no_elasticsearch(tmp_path):
    with pytest.raises(Invalid) as refused:
        build_cluster_memory(shared(tmp_path))
    assert "cluster.kafka_bootstrap" in str(refused.value) and "cluster.qdrant_url" in str(refused.value)
    assert "es_url" not in str(refused.value)
    with pytest.raises(Invalid, match="es_url"):  # the default stores still need it
        build_cluster_memory(Settings(profile="cluster", cluster={"kafka_bootstrap": "x:1", "qdrant_url": "http://x"}))


def test_a_rebuild_beside_is_refused_before_anything_is_opened(tmp_path):
    # Nothing is reachable at these addresses: a refusal that tried to connect first would say so.
    settings = shared(tmp_path, kafka_bootstrap="127.0.0.1:1", qdrant_url="http://127.0.0.1:1")
    with pytest.raises(Invalid, match="shared-folder.*no generations"):
        rebuild_cluster_beside(settings)
    assert not (tmp_path / "shared").exists()


def test_orgmem_rebuild_says_why_and_records_nothing(tmp_path, monkeypatch, capsys):
    from services.cli.main import main

    for name, value in {"ORGMEM_PROFILE": "cluster", "ORGMEM_CLUSTER__STORES": "shared-folder",
                        "ORGMEM_CLUSTER__KAFKA_BOOTSTRAP": "127.0.0.1:1",
                        "ORGMEM_CLUSTER__QDRANT_URL": "http://127.0.0.1:1"}.items():
        monkeypatch.setenv(name, value)
    assert main(["rebuild", "--data", str(tmp_path / "data")]) == 2
    assert "cluster.stores is 'shared-folder'" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # no log opened, no audit event appended
