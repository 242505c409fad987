"""`python -m services.cli` runs the `orgmem` command (tests start servers this way)."""

import sys

from services.cli.main import main

sys.exit(main())
