"""``python -m tierd``."""

import sys

from tierd.cli.main import main

sys.exit(main())
