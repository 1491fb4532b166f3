"""What every I/O back end is, as the :class:`~gids.Runtime` sees it, and the ticketed queues
that the host and NVMe back ends share.

A back end owns what serves the kernels' misses: its queues (device and mapped host memory),
the staging pages, the tickets, and the host threads that serve them, with their start, stop
and reset. It contributes its fields to the kernels' handle (:mod:`kernels.handle`: one flat
tuple, whose class picks the back end's I/O step at compile time, :mod:`kernels.backend`). The
Runtime keeps the cache, the arrays, sync, flush and recovery, and calls only what
:class:`IoBackend` names.
"""
import numpy as np
from numba import cuda

from gids import defaults
from gids import layout as L
from gids._platform import host_view
from gids.errors import DaemonError
from host_daemon.trace import TraceWriter


class IoBackend:
    """The interface, with the ticketed queues every back end so far has (as in BaM: a ticket
    per request, a staging page per queue entry, a turn per entry).

    Parameters
    ----------
    table : numpy.ndarray
        The Runtime's store table (``host_daemon.stores.T_COLUMNS`` per array), which the
        Runtime fills as arrays open; the server reads it.
    queues, queue_depth, page_size, threads : int
        Queue pairs, entries per queue, bytes per page, host threads serving the queues.
    model : host_daemon.ssd_model.SsdModel, optional
        Real-time SSD emulation: no completion before the model's time.
    trace : str or os.PathLike, optional
        Record every I/O to this file (``gids simulate``).

    What the Runtime uses
    ---------------------
    ``check_options(queue_depth)`` (a classmethod, before anything is allocated);
    ``handle_class`` and ``handle_fields()``; ``start()``, ``stop(bound)``, ``reset()``,
    ``check()``, ``drain_trace()``, ``close()``; ``threads`` (set between a stop and a start);
    ``server``, ``model``, ``allows_early_copy``, ``waits_for``.
    """

    #: The kernels' handle type for this back end (:mod:`kernels.handle`).
    handle_class = None
    #: What a kernel waited for when an I/O timed out, in words (for GidsTimeoutError).
    waits_for = None

    @classmethod
    def check_options(cls, queue_depth):
        """Raise ConfigError for settings this back end cannot serve (before any allocation)."""

    def __init__(self, table, *, queues, queue_depth, page_size, threads, model=None, trace=None,
                 engine="threads", engine_depth=1):
        self.table = table
        #: The server's file I/O (host_daemon.daemon.ENGINES) and its I/Os in flight per thread.
        self.engine = engine
        self.engine_depth = engine_depth
        #: Whether the host daemon registers its staging with its rings (read once, here).
        self.fixed_buffers = defaults.get("engine_fixed_buffers")
        self.queues = queues
        self.queue_depth = queue_depth
        self.page_size = page_size
        self.threads = threads
        self.model = model
        n_entries = queues * queue_depth
        # The host queues' records, in mapped host memory (the NVMe handle carries them too: its
        # fields start with ArrayHandle's).
        self.sq = cuda.mapped_array(n_entries * L.SQ_WORDS, dtype=np.int64)
        self.cq = cuda.mapped_array(n_entries * L.CQ_WORDS, dtype=np.int64)
        # uint64 words: numba-cuda's MappedNDArray.view() is broken, so allocate the type we use.
        self.staging = cuda.mapped_array(n_entries * page_size // 8, dtype=np.uint64)
        self.sq_ticket = cuda.to_device(np.zeros(queues, dtype=np.int64))
        self.entry_turn = cuda.to_device(np.zeros(n_entries, dtype=np.int64))
        host_view(self.sq)[:] = 0
        host_view(self.cq)[:] = 0
        self.trace_writer = TraceWriter(trace) if trace is not None else None
        #: What serves the queues (made at each start).
        self.server = None

    @property
    def allows_early_copy(self):
        """Whether a miss on a zero-copy page may start copying it before its completion:
        only where the completion names the page's words and no model times the answer."""
        return False

    def handle_fields(self):
        """This back end's fields of the kernels' handle, by name."""
        return dict(sq=self.sq, cq=self.cq, staging=self.staging, sq_ticket=self.sq_ticket,
                    entry_turn=self.entry_turn, n_queues=self.queues, depth=self.queue_depth)

    def _make_server(self):
        """A new, not yet started server of the queues (HostDaemon or a subclass)."""
        raise NotImplementedError

    def start(self):
        previous = self.server
        self.server = self._make_server()
        if previous is not None:   # a restart (after an error): what its engine said stays said
            self.server.follow(previous)
        self.server.start()

    def stop(self, bound):
        """Stop the server and wait until none of its threads runs any more: its own bound
        first, then up to ``bound`` seconds for a thread still inside a store call.

        Raises
        ------
        DaemonError
            A thread is still inside a store call after ``bound``: it may still use the queues,
            staging pages and stores when its call returns, so they must stay allocated.
        """
        if self.server is None:
            return
        try:
            self.server.stop()
            return
        except DaemonError:
            pass
        self.server.stop(timeout=bound)

    def reset(self):
        """Queues back to ticket 0 (between a stop and a start: the server restarts there)."""
        host_view(self.sq)[:] = 0
        host_view(self.cq)[:] = 0
        self.sq_ticket.copy_to_device(np.zeros(self.queues, dtype=np.int64))
        self.entry_turn.copy_to_device(np.zeros(self.queues * self.queue_depth, dtype=np.int64))

    def check(self):
        """Raise the server's DaemonError, if one of its threads failed."""
        self.server.check()

    def drain_trace(self):
        self.server.drain_trace()

    def close(self):
        """After the last stop: close the trace file."""
        if self.trace_writer is not None:
            self.trace_writer.close()
