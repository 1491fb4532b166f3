"""Settings of gids: the table, its environment variables and ``set`` are in
:mod:`kernels.settings` (below every layer, so that kernels and host_daemon read it too)."""
from kernels.settings import STAGING_BUDGET, all_settings, default_queues, env_name, get, set, when

__all__ = ["STAGING_BUDGET", "all_settings", "default_queues", "env_name", "get", "set", "when"]
