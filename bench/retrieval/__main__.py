import sys

from bench.retrieval.cli import main

sys.exit(main())
