"""Host side of gids: the daemon threads that serve the queues, and the backing stores.

Internal package: users ``import gids``. Nothing here imports device code: of :mod:`kernels`,
only its three project-free modules, :mod:`kernels.layout` (the record layouts shared with the
kernels), :mod:`kernels.settings` and :mod:`kernels.errors`.
"""
