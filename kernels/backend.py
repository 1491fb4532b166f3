"""The back end's I/O step of ``gids.read`` and of a dirty page's write-back: submit a page
request, wait for the warp's completions.

``read`` (kernels/access.py) is the same for every back end: pin, claim a slot (writing back a
dirty victim), take tickets, copy, publish. Only the I/O step differs, and the handle's type says
which it is:

- :class:`~kernels.handle.ArrayHandle`: the host daemon's request queues (:mod:`kernels.queue`),
  a record with ``OP_READ`` or ``OP_WRITE``;
- :class:`~kernels.handle.NvmeHandle`: NVMe submission/completion rings (:mod:`kernels.nvme`),
  a Read (02h) or Write (01h) command.

On the GPU the choice is made at compile time (``numba.cuda.extending.overload`` on the handle's
type), so a kernel over the host back end contains no NVMe code and pays nothing for it. The
simulator runs Python, so there it is an ``isinstance``.

``io_submit(h, mask, q, ticket, want, array_id, page, op, deadline) -> bool`` (collective over
``mask``; per lane, True once its request is written, False if it has no ticket, does not
``want`` to submit, or timed out): page ``page`` of array ``array_id``, ``op`` = ``OP_READ`` (into
the ticket's staging page) or ``OP_WRITE`` (from it: the caller has copied the page there and
fenced at system scope). Collective so that the NVMe path can write a warp's SQEs together.
``io_wait(h, mask, lane, q, ticket, submitted, deadline, since) -> (completed, status, source)``
(collective over ``mask``; ``status`` a gids STATUS_* code, ``source`` as in the host CQ record;
``since`` the %globaltimer when the lane's request went out: the host queues' first poll is
timed from it, whatever the lane did in between).
"""
from kernels import nvme, queue
from kernels.handle import NvmeHandle
from kernels.platform import SIMULATOR

if SIMULATOR:
    def io_submit(h, mask, q, ticket, want, array_id, page, op, deadline):
        step = nvme.submit_warp if isinstance(h, NvmeHandle) else queue.submit_lane
        return step(h, mask, q, ticket, want, array_id, page, op, deadline)

    def io_wait(h, mask, lane, q, ticket, submitted, deadline, since):
        if isinstance(h, NvmeHandle):
            return nvme.wait_warp(h, mask, lane, q, ticket, submitted, deadline)
        return queue.wait_warp(h, mask, lane, q, ticket, submitted, deadline, since)

else:
    from numba.cuda.extending import overload

    def io_submit(h, mask, q, ticket, want, array_id, page, op, deadline):
        raise NotImplementedError("device function: call it from a kernel")

    def io_wait(h, mask, lane, q, ticket, submitted, deadline, since):
        raise NotImplementedError("device function: call it from a kernel")

    def _is_nvme(h):
        return getattr(h, "instance_class", None) is NvmeHandle

    @overload(io_submit, target="cuda")
    def _io_submit(h, mask, q, ticket, want, array_id, page, op, deadline):
        step = nvme.submit_warp if _is_nvme(h) else queue.submit_lane
        return lambda h, mask, q, ticket, want, array_id, page, op, deadline: step(
            h, mask, q, ticket, want, array_id, page, op, deadline)

    @overload(io_wait, target="cuda")
    def _io_wait(h, mask, lane, q, ticket, submitted, deadline, since):
        if _is_nvme(h):
            step = nvme.wait_warp
            return lambda h, mask, lane, q, ticket, submitted, deadline, since: step(
                h, mask, lane, q, ticket, submitted, deadline)
        step = queue.wait_warp
        return lambda h, mask, lane, q, ticket, submitted, deadline, since: step(
            h, mask, lane, q, ticket, submitted, deadline, since)
