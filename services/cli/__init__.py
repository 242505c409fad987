"""The `orgmem` command.

One setting is made here, before anything imports numpy (this package is what the `orgmem` script
and `python -m services.cli` load first): OpenBLAS's own threads, which spin for a while after each
matrix product, are kept to one. The server's products are one query against a few thousand rows
(the exact shards' copy, the version order); with a thread per core, the spinning took the cores
from the query encoder and the shard hosts. On a 2-core host at 20k rows (bench/query_path.py),
the copy with a thread per core answered at p50 18.1 ms (the embedding 4.9) against 14.1 (2.7)
without it, and with one thread at 12.0 (2.6). An operator's own value is kept.
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
