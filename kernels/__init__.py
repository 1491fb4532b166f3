"""Device code of gids: sync primitives, warp helpers, queues, the page cache, array access.

Internal package: users ``import gids``. Nothing here imports host code. Three modules here
import nothing from the project and sit below every layer, so that host_daemon and gids read
them too (without importing gids): :mod:`kernels.layout` (the record layouts),
:mod:`kernels.settings` (every setting) and :mod:`kernels.errors` (the exceptions).
"""
