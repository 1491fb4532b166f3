"""The device-side handle of one open array: what a kernel receives and passes to ``gids.read``
and ``gids.write``.

A namedtuple of device arrays and integers, which Numba passes to a kernel as one argument (in
the simulator too). The host builds it (``StorageArray.handle``); device code only reads fields.
``ArrayHandle`` is the handle of the host-daemon back end; ``NvmeHandle`` (``backend="nvme"``)
has the same fields and the NVMe queue pairs' after them. The type of the handle picks the
back end's I/O step at compile time (:mod:`kernels.backend`).

The classes subclass their namedtuples without ``__slots__``, so that an instance has a
``__dict__``: :mod:`kernels.launch` keeps there what a launch would otherwise recompute from
the ~30 fields every time (the Numba type, the kernel arguments).
"""
from collections import namedtuple

_ARRAY_FIELDS = [
    # --- the array ---
    "cache",        # the cache's slot bytes viewed as the array's dtype, 1-D
    "cache_words",  # the same bytes viewed as uint64 (for page copies)
    "zero",         # one element of the array's dtype holding 0: what a failed read returns
    "n_elems",      # elements in the array; an index outside [0, n_elems) is an error
    "elem_shift",   # log2(elements per page)
    "page_words",   # page size in uint64 words
    "array_id",     # row of the daemon's store table
    "page_base",    # global page id of the array's page 0 (all open arrays share one page space)
    "writable",     # 1 if opened with mode="r+"; gids.write on a handle with 0 records an error
    "zero_word",    # uint32 0, a value the compiler cannot know (kernels.cache.unpin_after_reads)
    # --- the page cache (shared by every array of a Runtime) ---
    "page_state",   # uint64 per global page: its slot << 32 | VALID | BUSY | ERROR | DIRTY |
                    # reference count (gids.layout.PAGE_*; the slot while it has one)
    "slot_page",    # int64 per slot: the global page it holds, SLOT_EMPTY or SLOT_CLAIMED
    "clock",        # int64[1]: the clock hand of the replacement scan
    "n_slots",
    "page_bases",   # int64[MAX_ARRAYS]: page_base of every open array (to find a dirty victim's)
    # --- the queues to the host daemon ---
    "sq",           # int64 submission records, mapped host memory, [n_queues * depth * SQ_WORDS]
    "cq",           # int64 completion records, mapped host memory, [n_queues * depth * CQ_WORDS]
    "staging",      # uint64 staging pages, mapped host memory, [n_queues * depth * page_words]
    "zero_copy",    # uint64 view of the array's pinned store buffer (a 1-word dummy if none)
    "early_base",   # word of zero_copy where the array's page 0 starts, if a miss may copy its
                    # page while the request is out (kernels/cache.py, start_early_copy); else -1
    "sq_ticket",    # int64 per queue: next ticket (device memory)
    "entry_turn",   # int64 per queue entry: the ticket // depth allowed to use it (device memory)
    "n_queues",
    "depth",
    # --- reporting ---
    "err",          # int64[ERR_WORDS]: the first error a thread met (layout.ERR_*)
    "stats",        # uint64[N_STAT_SHARDS * N_STATS] counters
    "timeout_ns",   # bound on any one wait inside gids.read
    "abort",        # int64[1], mapped host memory: non-zero asks every waiting thread to give up
    # --- the bulk page copy (kernels/bulk.py) ---
    "copy_locks",   # uint32[N_LOCKS] (device, one array per CUDA context): lock b % N_LOCKS
                    # is held by a lane copying a page through block b's shared-memory buffer
    # --- the host tier (gids.host_tier; kernels/tier.py) ---
    "tier_slot",    # int64 per global page (device): its slot in the host tier, or
                    # TIER_NO_SLOT (a 1-word dummy without a tier)
    "tier",         # the tier's page slots (pinned, device-mapped) viewed as the array's dtype
    "tier_words",   # the same bytes viewed as uint64 (for page copies)
    "tier_mode",    # layout.TIER_*: TIER_NONE without a tier, else the array's mode
    "tier_ref",     # int32 per tier slot (device): set by a tier hit; the host's clock clears it
    "tier_free",    # int64 (device): free tier slots the host left for victims
    "tier_free_top",  # int64[2] (device): [free slots taken by kernels, free slots left]
    "tier_victims",   # 1 if this array's clean evicted pages enter the tier
]


class ArrayHandle(namedtuple("ArrayHandle", _ARRAY_FIELDS)):
    """The host-daemon back end's handle (fields above)."""


#: Fields of the NVMe queue pairs (``backend="nvme"``), after ArrayHandle's. A command slot
#: (``entry`` = q * depth + ticket % depth, as for the host queues) owns a command id, a bounce
#: buffer (the ``staging`` page: the controller's DMA target) and a completion word.
NVME_FIELDS = [
    "nv_sq",        # int64 SQEs, mapped host memory, [n_queues * nv_ring * NVME_SQE_WORDS]
    "nv_cq",        # int64 CQEs, mapped host memory, [n_queues * nv_ring * NVME_CQE_WORDS]
    "nv_db",        # int64 doorbells, mapped host memory, [n_queues * 2]: SQ tail, CQ head
    "nv_ring",      # entries per SQ and CQ ring: depth + 1 (a ring holds at most size - 1)
    "nv_sq_tail",   # int64 per queue (device): tickets the SQ tail doorbell covers (a count;
                    # the SQ doorbell handoff: the warp whose first ticket it equals rings next)
    "nv_sq_head",   # int64 per queue (device): SQEs the controller has fetched, from CQE.SQHD
    "nv_cq_head",   # int64 per queue (device): CQEs consumed and doorbelled (a count; the CQ
                    # doorbell handoff, as nv_sq_tail)
    "nv_cpl",       # int64 per command slot (device): CID | status << 16 | CPL_VALID, left by
                    # the lane that read the command's CQE, when it was not the command's own
    "nv_prp_base",  # bus address of staging page 0: PRP1 of slot e is nv_prp_base + e * page
]


class NvmeHandle(namedtuple("NvmeHandle", _ARRAY_FIELDS + NVME_FIELDS)):
    """The direct NVMe path's handle: ArrayHandle's fields, then :data:`NVME_FIELDS`."""


#: Every handle class (what :mod:`kernels.launch` recognises).
HANDLE_CLASSES = (ArrayHandle, NvmeHandle)
