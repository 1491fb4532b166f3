"""The device-side handle of one open array: what a kernel receives and passes to ``gids.read``
and ``gids.write``.

A namedtuple of device arrays and integers, which Numba passes to a kernel as one argument (in
the simulator too). The host builds it (``StorageArray.handle``); device code only reads fields.
"""
from collections import namedtuple

ArrayHandle = namedtuple("ArrayHandle", [
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
    # --- the page cache (shared by every array of a Runtime) ---
    "page_state",   # uint32 per global page: VALID | BUSY | ERROR | DIRTY | reference count
    "page_slot",    # int64 per global page: its slot while VALID
    "slot_page",    # int64 per slot: the global page it holds, SLOT_EMPTY or SLOT_CLAIMED
    "clock",        # int64[1]: the clock hand of the replacement scan
    "n_slots",
    "page_bases",   # int64[MAX_ARRAYS]: page_base of every open array (to find a dirty victim's)
    # --- the queues to the host daemon ---
    "sq",           # int64 submission records, mapped host memory, [n_queues * depth * SQ_WORDS]
    "cq",           # int64 completion records, mapped host memory, [n_queues * depth * CQ_WORDS]
    "staging",      # uint64 staging pages, mapped host memory, [n_queues * depth * page_words]
    "zero_copy",    # uint64 view of the array's pinned store buffer (a 1-word dummy if none)
    "sq_ticket",    # int64 per queue: next ticket (device memory)
    "entry_turn",   # int64 per queue entry: the ticket // depth allowed to use it (device memory)
    "n_queues",
    "depth",
    # --- reporting ---
    "err",          # int64[ERR_WORDS]: the first error a thread met (layout.ERR_*)
    "stats",        # uint64[N_STAT_SHARDS * N_STATS] counters
    "timeout_ns",   # bound on any one wait inside gids.read
    "abort",        # int64[1], mapped host memory: non-zero asks every waiting thread to give up
])
