"""``python -m gids ...``: the ``gids`` command (:mod:`gids.cli`)."""
import sys

from gids.cli import main

sys.exit(main())
