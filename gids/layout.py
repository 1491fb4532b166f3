"""The record layouts shared by device and host code, defined in :mod:`kernels.layout` (below
every layer, so that kernels and host_daemon read it without importing gids)."""
from kernels.layout import *  # noqa: F401,F403
