"""The direct NVMe back end: kernels write NVMe commands into submission rings and ring
doorbells; an emulated controller (:class:`host_daemon.nvme_controller.NvmeController`) serves
them and posts completions by phase tag (``docs/architecture.md``)."""
import numpy as np
from numba import cuda

from gids import layout as L
from gids._platform import host_view
from gids.backends.base import IoBackend
from gids.errors import ConfigError
from host_daemon.nvme_controller import NvmeController
from kernels.handle import NvmeHandle


class NvmeQueues(IoBackend):
    """NVMe queue pairs served by the emulated controller (``Runtime(backend="nvme")``).

    Rings and doorbells live in mapped host memory (the controller reads and writes them; a
    real drive would reach them by DMA), the driver's state in device memory; the staging pages
    are the commands' bounce buffers. Layouts in gids.layout / docs/formats.md.
    """

    handle_class = NvmeHandle
    waits_for = "the NVMe controller to complete a command"

    #: Test hook: the controller delays each completion by a random time up to this many
    #: microseconds, so that commands complete out of order without an SSD model.
    jitter_us = 0.0

    @classmethod
    def check_options(cls, queue_depth):
        if queue_depth > L.NVME_MAX_DEPTH:
            raise ConfigError(f"gids: the NVMe queue depth is at most {L.NVME_MAX_DEPTH} "
                              f"commands per queue pair, got {queue_depth}")

    def __init__(self, table, **options):
        super().__init__(table, **options)
        queues, depth = self.queues, self.queue_depth
        ring = depth + 1
        self.nv_sq = cuda.mapped_array(queues * ring * L.NVME_SQE_WORDS, dtype=np.int64)
        self.nv_cq = cuda.mapped_array(queues * ring * L.NVME_CQE_WORDS, dtype=np.int64)
        self.nv_db = cuda.mapped_array(queues * 2, dtype=np.int64)
        zeros = lambda n: cuda.to_device(np.zeros(n, dtype=np.int64))   # noqa: E731
        self.nv_sq_tail = zeros(queues)
        self.nv_sq_head = zeros(queues)
        self.nv_cq_head = zeros(queues)
        self.nv_cpl = zeros(queues * depth)
        self._reset_rings()

    def handle_fields(self):
        """The host queues' fields, and the NvmeHandle's own (see kernels/handle.py)."""
        return dict(super().handle_fields(),
                    nv_sq=self.nv_sq, nv_cq=self.nv_cq, nv_db=self.nv_db,
                    nv_ring=self.queue_depth + 1, nv_sq_tail=self.nv_sq_tail,
                    nv_sq_head=self.nv_sq_head, nv_cq_head=self.nv_cq_head,
                    nv_cpl=self.nv_cpl,
                    nv_prp_base=int(host_view(self.staging).ctypes.data))

    def _make_server(self):
        return NvmeController(
            host_view(self.nv_sq), host_view(self.nv_cq), host_view(self.nv_db),
            host_view(self.staging), self.table, self.queues, self.queue_depth,
            self.page_size, self.threads, model=self.model,
            trace_writer=self.trace_writer, jitter_us=self.jitter_us,
            engine=self.engine, engine_depth=self.engine_depth)

    def reset(self):
        super().reset()
        self._reset_rings()

    def _reset_rings(self):
        for mapped in (self.nv_sq, self.nv_cq, self.nv_db):
            host_view(mapped)[:] = 0
        for dev in (self.nv_sq_tail, self.nv_sq_head, self.nv_cq_head, self.nv_cpl):
            dev.copy_to_device(np.zeros(dev.size, dtype=np.int64))
