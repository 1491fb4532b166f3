"""The exceptions gids raises, defined in :mod:`kernels.errors` (below every layer, so that
host_daemon raises them too)."""
from kernels.errors import *  # noqa: F401,F403  (every GidsError subclass)
