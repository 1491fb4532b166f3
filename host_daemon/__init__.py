"""Host side of gids: the daemon threads that serve the queues, and the backing stores.

Internal package: users ``import gids``. Nothing here imports device code; queue layouts come
from :mod:`gids.layout`, the one module shared with :mod:`kernels`.
"""
