"""The I/O back ends a Runtime can use, by name (``Runtime(backend=NAME)``).

A back end is an :class:`~gids.backends.base.IoBackend`; a new one registers its class here.
"""
from gids.backends.base import IoBackend
from gids.backends.host import HostQueues
from gids.backends.nvme import NvmeQueues

#: ``Runtime(backend=name)`` -> the class that serves its misses.
BACKENDS = {"host": HostQueues, "nvme": NvmeQueues}

__all__ = ["BACKENDS", "IoBackend", "HostQueues", "NvmeQueues"]
