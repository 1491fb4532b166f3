"""The host back end: request queues in mapped host memory, served by the daemon's threads
(:class:`host_daemon.daemon.HostDaemon`) reading the stores."""
from gids._platform import host_view
from gids.backends.base import IoBackend
from host_daemon.daemon import HostDaemon
from kernels.handle import ArrayHandle


class HostQueues(IoBackend):
    """Host daemon threads serving the request queues (``Runtime(backend="host")``)."""

    handle_class = ArrayHandle
    waits_for = "the host daemon to complete a page request"

    @property
    def allows_early_copy(self):
        # The daemon's completion names the page's words in the zero-copy buffer; a model would
        # time the answer, which the early copy would run ahead of.
        return self.model is None

    def _make_server(self):
        return HostDaemon(host_view(self.sq), host_view(self.cq), host_view(self.staging),
                          self.table, self.queues, self.queue_depth, self.page_size,
                          self.threads, model=self.model, trace_writer=self.trace_writer,
                          engine=self.engine, engine_depth=self.engine_depth,
                          fixed_buffers=self.fixed_buffers)
