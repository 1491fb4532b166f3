"""The exceptions gids raises, defined in :mod:`kernels.errors` (below every layer, so that
host_daemon raises them too)."""
from kernels.errors import (AbortedError, CacheExhaustedError, ConfigError, DaemonError,  # noqa: F401
                            GidsError, GidsTimeoutError, IndexOutOfRangeError, ReadOnlyError,
                            StorageIOError)
