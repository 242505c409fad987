"""`orgmem indexer`: project the log into the row store and indexes, as its own process.

Cluster profile: one member of a Kafka consumer group (run one or more: the group shares the
log's partitions among them, and a member without one stands by). Embedded profile: the headless indexer of a data folder (for
`orgmem ingest --no-index` without a server); it takes the folder's lock like `serve` does.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from services.cli.common import settings_from

log = logging.getLogger(__name__)


def cmd_indexer(args: argparse.Namespace) -> int:
    from services.app.indexer import GroupIndexer
    from services.bootstrap import indexer_feed, open_memory

    settings = settings_from(args)
    batch = args.batch or settings.indexer_batch
    with open_memory(settings, role="indexer") as memory:
        feed = indexer_feed(settings, memory, args.group, batch)
        indexer = GroupIndexer(memory.projection, feed, memory.checkpoints, batch=batch, poll_s=settings.indexer_poll_s,
                               heartbeat=Path(args.heartbeat) if args.heartbeat else None, heads=memory.heads)

        def stop(signum, _frame) -> None:
            log.info("indexer: signal %d, finishing the current batch", signum)
            indexer.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        print(f"orgmem indexer ({settings.profile}) following the log from position {memory.applied}",
              file=sys.stderr, flush=True)
        try:
            indexer.run()
        finally:
            feed.close()
    if indexer.halted:
        print(f"orgmem indexer: {indexer.halted}", file=sys.stderr, flush=True)
        return 3
    return 0


def register(command, sub) -> None:
    p = command("indexer", cmd_indexer, "project the log into the row store and indexes (its own process)")
    p.add_argument("--profile", choices=["embedded", "cluster"], help="default: ORGMEM_PROFILE")
    p.add_argument("--group", default="orgmem-indexer", help="Kafka consumer group (cluster profile)")
    p.add_argument("--batch", type=int, help="events per batch (default: ORGMEM_INDEXER_BATCH)")
    p.add_argument("--heartbeat", help="file touched after every batch or idle poll (for health checks)")
