"""The cluster's projection generations: generation 1 under the configured names for a new
deployment, and the rebuild beside the live generation (services/app/blue_green.py) that the
Celery task `orgmem.rebuild` and `orgmem rebuild` (ORGMEM_PROFILE=cluster) run."""

from __future__ import annotations

from services.app.blue_green import rebuild_beside
from services.errors import Invalid
from services.settings import Settings


def check_rebuild_beside(settings: Settings) -> None:
    """Refuse, before anything is recorded or built, a rebuild the cluster's stores cannot take:
    a shared folder's SQLite rows and tantivy index have no generations to build beside."""
    if settings.cluster.stores == "shared-folder":
        raise Invalid("rebuild: cluster.stores is 'shared-folder' (SQLite rows and a tantivy index in "
                      "cluster.shared_dir), which has no generations to build beside the live ones; a rebuild "
                      "of the cluster profile needs cluster.stores 'elasticsearch' (docs/cluster.md)")


def ensure_generations(settings: Settings, es_client, qdrant, dim: int) -> None:
    """Where neither the rows index nor the collection exists yet, make generation 1 and point
    the configured names (aliases) at it, so that every later rebuild can switch atomically."""
    from services.adapters.cluster_generations import EsGenerations, QdrantGenerations
    from services.adapters.row_store.elasticsearch import ElasticsearchRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex

    cluster = settings.cluster
    EsGenerations(es_client, cluster.es_index).ensure(lambda name: ElasticsearchRowStore(
        client=es_client, index=name, shards=cluster.es_shards, replicas=cluster.es_replicas))
    QdrantGenerations(qdrant, cluster.qdrant_collection).ensure(lambda name: QdrantServerVectorIndex(qdrant, name, dim))


def rebuild_cluster_beside(settings: Settings, progress=None):
    """Replay the log into a new generation of the rows index and the collection while the live
    one serves, switch both names to it, drop the old one. Returns the replay's totals and the
    new generation's counts."""
    from qdrant_client import QdrantClient

    from services.adapters.cluster_generations import EsGenerations, QdrantGenerations
    from services.adapters.elasticsearch_common import connect
    from services.bootstrap.memory import build_cluster_memory

    check_rebuild_beside(settings)
    cluster = settings.cluster
    es_client, qdrant = connect(cluster.es_url), QdrantClient(url=cluster.qdrant_url, timeout=30)
    try:
        generations = [EsGenerations(es_client, cluster.es_index), QdrantGenerations(qdrant, cluster.qdrant_collection)]

        def open_aside(names: list[str]):
            es_index, collection = names
            aside = settings.model_copy(update={"cluster": cluster.model_copy(
                update={"es_index": es_index, "qdrant_collection": collection})})
            memory, _ = build_cluster_memory(aside, role="indexer", aside=True)
            return memory

        return rebuild_beside(generations, open_aside, progress)
    finally:
        es_client.close()
        qdrant.close()
