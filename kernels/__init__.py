"""Device code of gids: sync primitives, warp helpers, queues, the page cache, array access.

Internal package: users ``import gids``. Nothing here imports host code; queue and cache
layouts come from :mod:`gids.layout`, the one module shared with :mod:`host_daemon`.
"""
