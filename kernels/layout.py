"""Record layouts shared by device code (``kernels``) and host code (``host_daemon``).

This is the one module both sides read, so that every word offset and bit is defined once.
It imports nothing but numpy. The byte layouts are drawn in ``docs/formats.md``.

All queue records are arrays of little-endian int64 words in mapped (pinned, device-visible)
host memory. One writer per word: the GPU writes submission records, the host daemon writes
completion records. Each record is one word that says whose it is (a tag or sequence number),
written by one store and polled by the other side with acquire loads.

The functions that build and take apart those words (``sq_word``, ``cq_fields`` ...) are the
only definition of their bit layouts: each is plain arithmetic on its arguments and this
module's constants, calling nothing, so the daemon compiles them with ``njit``
(``host_daemon.daemon``) and the kernels with ``cuda.jit`` (``kernels.queue``).
"""
import numpy as np

# --- Page state word (uint64, one per page of every open array, in device memory) -----------
# Low half: the page's state bits and its reference count. High half: the cache slot that holds
# the page's bytes (set together with VALID, kept while VALID and while BUSY | DIRTY, 0 once the
# page is not cached). One word, so that the hit path's pin (one atomic add) returns the slot
# with the state: no second load of the slot after it (kernels/cache.py).
PAGE_VALID = np.uint64(1 << 31)   # the page's bytes are in cache slot page_state[page] >> 32
PAGE_BUSY = np.uint64(1 << 30)    # one thread owns the page and is loading it
PAGE_ERROR = np.uint64(1 << 29)   # the last load failed; waiters give up instead of spinning
PAGE_DIRTY = np.uint64(1 << 28)   # the slot holds writes the store has not got yet; with BUSY:
                                  # the page is being written back (readers wait, as for a load)
PAGE_REF_MASK = np.uint64((1 << 24) - 1)  # threads holding the page pinned (reading its slot)
# A reference is added and dropped as +1 and -1 (2**64 - 1) on the whole word. The count stays
# below 2**24: references are held by warp leaders, one per warp and page in a call (kept past
# the call only by gids.pin_page, until unpin_page), and an H200 runs at most 132 * 64 warps at
# once. So an add never carries out of the count (into the state bits, let alone the slot), and
# a drop, made only by a holder (count >= 1), never borrows from them. Bits 24-27 are unused.
PAGE_SLOT_SHIFT = np.uint64(32)                   # slot = word >> PAGE_SLOT_SHIFT
PAGE_SLOT_MASK = np.uint64(0xFFFFFFFF << 32)      # slots fit in 31 bits (2**31 pages of 512 B
                                                  # are a TiB of GPU memory)

SLOT_EMPTY = -1    # slot_page[s]: slot holds no page
SLOT_CLAIMED = -2  # slot_page[s]: a loader is evicting or filling the slot

# --- Submission queue record (written by a GPU thread) ---------------------------------------
# One 64-bit word holds the whole request, written by one strong store and polled by the daemon:
# no fence before it (a system-scope release costs 0.58 us of every miss's path on the H200),
# and no second word whose order with it would need one. The
# daemon knows which turn it waits for, so the tag tells a new request from the entry's last:
#
#   bits  0-39  page index within the array (SQ_MAX_PAGE: Runtime.open_array refuses more)
#   bits 40-47  array id (row of the daemon's store table; MAX_ARRAYS rows)
#   bits 48-49  op: OP_READ (store -> staging) or OP_WRITE (staging -> store)
#   bits 50-62  tag: (turn + 1) mod 2**13, turn = ticket // depth. The entry's previous request
#               was of turn - 1, so its tag differs; the rings start zeroed and no tag of turn
#               0 is 0. Bit 63 stays 0: the word is a non-negative int64 on both sides.
SQ_WORD = 0
SQ_WORDS = 4    # 32 bytes per record (the rest unused): one record per PCIe-friendly sector
SQ_PAGE_BITS = 40
SQ_MAX_PAGE = (1 << SQ_PAGE_BITS) - 1
SQ_ARRAY_SHIFT = 40
SQ_ARRAY_MASK = 0xFF
SQ_OP_SHIFT = 48
SQ_OP_MASK = 0x3
SQ_TAG_SHIFT = 50
SQ_TAG_MASK = (1 << 13) - 1

OP_READ = 0     # also the value of a record never written (the rings start zeroed)
OP_WRITE = 1    # write-back of a dirty page on eviction; the page is in the entry's staging

# --- Completion queue record (written by a host daemon thread) -------------------------------
# One 64-bit word holds the whole answer, stored with release by the daemon and read by the GPU
# with one acquire load: each strong load from host memory is a PCIe round trip of about a
# microsecond, and a second load for the status after the one that saw the sequence was one
# more on every miss.
#
#   bits  0-19  (ticket + 1) mod 2**20: the completion is the ticket's (an entry is reused by
#               ticket + depth, and depth < 2**19, so the value of the entry's previous
#               ticket never matches)
#   bits 20-23  -status (STATUS_OK = 0, or a negative STATUS_* code)
#   bits 24-62  source + 1: 0 for SOURCE_STAGING (the page is in the entry's staging buffer),
#               else 1 + the word offset of the page in the array's zero-copy store buffer
#               (no CPU copy was made); offsets above CQ_MAX_SOURCE go through staging
CQ_WORD = 0
CQ_WORDS = 4    # 32 bytes per record (the rest unused): one record per PCIe-friendly sector
CQ_SEQ_BITS = 20
CQ_SEQ_MASK = (1 << CQ_SEQ_BITS) - 1
CQ_STATUS_SHIFT = 20
CQ_STATUS_MASK = 0xF
CQ_SOURCE_SHIFT = 24
CQ_MAX_SOURCE = (1 << 39) - 2       # word offsets up to 4 TiB of zero-copy store
MAX_QUEUE_DEPTH = 1 << (CQ_SEQ_BITS - 1)


def cq_seq(ticket):
    """The sequence field of ticket ``ticket``'s completion word."""
    return (ticket + 1) & CQ_SEQ_MASK


def cq_word(seq, status, source):
    """The completion word of the ticket whose :func:`cq_seq` is ``seq`` (the daemon stores
    it)."""
    return ((source + 1) << CQ_SOURCE_SHIFT) | ((-status) << CQ_STATUS_SHIFT) | seq


def cq_fields(word):
    """``(seq, status, source)`` of a completion word (``kernels.queue.wait_completion``)."""
    return (word & CQ_SEQ_MASK, -((word >> CQ_STATUS_SHIFT) & CQ_STATUS_MASK),
            (word >> CQ_SOURCE_SHIFT) - 1)


def sq_tag(ticket, depth):
    """The tag field of ticket ``ticket``'s request in a queue of ``depth`` entries."""
    return (ticket // depth + 1) & SQ_TAG_MASK


def sq_word(tag, array_id, page, op):
    """The request word of the ticket whose :func:`sq_tag` is ``tag`` (``kernels.queue.submit``
    stores it)."""
    return (tag << SQ_TAG_SHIFT) | (op << SQ_OP_SHIFT) | (array_id << SQ_ARRAY_SHIFT) | page


def sq_fields(word):
    """``(tag, array_id, page, op)`` of a request word (``host_daemon.daemon.serve_queues``)."""
    return ((word >> SQ_TAG_SHIFT) & SQ_TAG_MASK, (word >> SQ_ARRAY_SHIFT) & SQ_ARRAY_MASK,
            word & SQ_MAX_PAGE, (word >> SQ_OP_SHIFT) & SQ_OP_MASK)


SOURCE_STAGING = -1
STATUS_OK = 0
STATUS_IO_ERROR = -1      # the store's read failed (pread returned -1)
STATUS_SHORT_READ = -2    # the store returned fewer bytes than the page holds
STATUS_BAD_REQUEST = -3   # unknown array id or page out of range (a runtime bug, never user input)
STATUS_SHORT_WRITE = -4   # the store took fewer bytes than the page holds (disk full?)

# --- Error record (int64 words in device memory, first error wins) ---------------------------
ERR_CODE = 0
ERR_ARRAY = 1
ERR_PAGE = 2     # page index within the array, or -1
ERR_DETAIL = 3   # element index for ERR_INDEX, completion status for ERR_IO and ERR_WRITE_IO,
#                  DETAIL_NO_LEADER for an ERR_TIMEOUT_LOADER of a lane whose leader never answered
ERR_WORDS = 4

ERR_NONE = 0
ERR_INDEX = 1            # an element index outside the array
ERR_IO = 2               # the store could not read a page
ERR_TIMEOUT_QUEUE = 3    # waited too long for a free submission queue entry
ERR_TIMEOUT_IO = 4       # waited too long for the daemon to complete a request
ERR_TIMEOUT_SLOT = 5     # found no evictable cache slot in time (too many pages in use at once)
ERR_TIMEOUT_LOADER = 6   # waited too long for another thread to load a page
ERR_WRITE_IO = 7         # the store could not take a dirty page written back on eviction
ERR_READ_ONLY = 8        # gids.write on an array opened read-only

#: ERR_DETAIL of an ERR_TIMEOUT_LOADER recorded by a lane of a pin's slow path whose group's
#: leader never answered (it was not among the lanes of the call: kernels/access.py).
DETAIL_NO_LEADER = -2

# --- Statistics counters (uint64, sharded [N_STAT_SHARDS, N_STATS] to spread atomics) ---------
STAT_HITS = 0        # page lookups that found the page resident
STAT_MISSES = 1      # page lookups that did not (they loaded it, or waited for its loader)
STAT_IOS = 2         # pages read from the store
STAT_EVICTIONS = 3   # resident pages dropped to make room
STAT_WRITEBACKS = 4  # dirty pages written back to the store on eviction (flush counts on the host)
# Where a miss's time goes (nanoseconds summed over lookups; added on the miss path only, so a
# hit costs nothing more): the loader's request from submission to completion, and the whole
# miss path of a lookup (a slot, the write-back, the request, the copy, or the wait for another
# warp's load). And the rounds a loader found no evictable slot.
STAT_IO_NS = 5
STAT_MISS_NS = 6
STAT_SLOT_RETRIES = 7
STAT_BULK_COPIES = 8  # pages copied into their slots by bulk copy (TMA; kernels/bulk.py)
# Two parts of a loader's miss (ns summed over I/Os, like STAT_IO_NS): from its ticket to its
# request published (the wait for the queue entry, the record's stores to host memory), and
# from the completion seen to the page in its slot, visible GPU-wide (the copy and the fence).
STAT_SUBMIT_NS = 9
STAT_COPY_NS = 10
# A loader's time finding a slot (the clock's scan, the victim's unmapping; ns summed over the
# claims, retries included): with the two above, what one miss spends besides waiting for its
# I/O (python -m workloads.microbench latency prints the breakdown).
STAT_CLAIM_NS = 11
# Pages (among STAT_BULK_COPIES) whose bulk copy started while their request was out
# (kernels/cache.py, start_early_copy).
STAT_EARLY_COPIES = 12
# The host tier (gids.host_tier): misses whose page a loader copied from the tier into its slot
# (no request), page lookups answered by reading the element straight from the tier (direct
# mode, no slot taken), and pages a kernel's victim fill put in the tier. The host counts its
# own fills (static fill) and every eviction from the tier (clear, clock, a write-back that made
# the tier's copy stale): no kernel evicts from it.
STAT_TIER_HITS = 13
STAT_TIER_DIRECT = 14
STAT_TIER_FILLS = 15
# Window hints (gids/window.py): pages named by Runtime.prefetch, pages pinned by Runtime.hold.
STAT_PREFETCHED = 16
STAT_HELD_PAGES = 17
N_STATS = 18
N_STAT_SHARDS = 64

# --- Store table (one row per open array; read by the daemon) --------------------------------
STORE_KIND_FILE = 0         # pread from a file descriptor
STORE_KIND_MEMORY = 1       # memcpy from a host buffer
STORE_KIND_ZERO_COPY = 2    # the buffer is pinned and device-mapped: no copy, the GPU reads it
STORE_KIND_FAULTY = 3       # memcpy from a host buffer, with injected faults (tests)
MAX_ARRAYS = 256

# --- Host tier (gids.host_tier; handle field tier_mode) -------------------------------------
TIER_NONE = 0       # the Runtime has no host tier: the miss path never looks at it
TIER_COPY = 1       # a miss on a page in the tier copies it into a GPU slot (no request)
TIER_DIRECT = 2     # a read of a page not in the GPU cache but in the tier reads the element
                    # there (zero-copy, a sector at a time) and takes no slot, as does
                    # pin_page_or_tier; pin_page, writes: as TIER_COPY
TIER_NO_SLOT = -1   # tier_slot[page]: the page is not in the tier

# --- NVMe queue pairs (Runtime(backend="nvme"); drawn in docs/formats.md) ---------------------
# Real NVMe record layouts (NVM Express Base Specification 2.0, figures "Common Command Format"
# and "Completion Queue Entry"), held as little-endian int64 words so that one 8-byte store
# writes a whole field pair and the CQE's phase, command id and status arrive together.
NVME_SQE_WORDS = 8          # 64-byte submission queue entry
SQE_CDW0_NSID = 0           # bits 0-7 opcode, 8-9 FUSE, 14-15 PSDT, 16-31 CID; 32-63 NSID
SQE_MPTR = 2                # bytes 16-23, unused (0)
SQE_PRP1 = 3                # bytes 24-31: data pointer, PRP entry 1
SQE_PRP2 = 4                # bytes 32-39: PRP entry 2 (0: one memory page is enough)
SQE_SLBA = 5                # bytes 40-47 (CDW10-11): starting LBA
SQE_CDW12_13 = 6            # bits 0-15 NLB (number of blocks - 1); 32-63 CDW13 (0)
SQE_CID_SHIFT = 16
SQE_NSID_SHIFT = 32

NVME_CQE_WORDS = 2          # 16-byte completion queue entry
CQE_DW0_DW1 = 0             # command specific, reserved (0 for reads and writes)
CQE_DW2_DW3 = 1             # bits 0-15 SQHD, 16-31 SQID, 32-47 CID, 48 phase tag, 49-63 status
CQE_SQID_SHIFT = 16
CQE_CID_SHIFT = 32
CQE_PHASE_SHIFT = 48
CQE_STATUS_SHIFT = 49

NVME_OP_WRITE = 0x01        # NVM command set: Write (host memory at PRP1 -> the LBAs)
NVME_OP_READ = 0x02         # NVM command set: Read (the LBAs -> host memory at PRP1)
NVME_LBA_BYTES = 512        # logical block size of every namespace
NVME_MAX_DEPTH = 1024       # command slots per queue pair (CIDs are 16 bits: slot + generation)

# Doorbells (int64 words standing for the BAR registers at 0x1000 + (2y + k) * stride):
# queue y's SQ tail at word 2y, its CQ head at word 2y + 1, as in the register map.
DB_SQ_TAIL = 0
DB_CQ_HEAD = 1

# Status field (15 bits: SC bits 0-7, SCT bits 8-10, ..., DNR bit 14).
NVME_SC_SUCCESS = 0x000
NVME_SC_INVALID_OPCODE = 0x001      # generic: invalid command opcode
NVME_SC_INVALID_FIELD = 0x002       # generic: invalid field in command (e.g. unaligned LBA)
NVME_SC_DATA_XFER_ERROR = 0x004     # generic: data transfer error (PRP outside the DMA window)
NVME_SC_INVALID_NS = 0x00B          # generic: invalid namespace or format
NVME_SC_LBA_RANGE = 0x080           # generic: LBA out of range
NVME_SC_WRITE_FAULT = 0x280         # media error (SCT 2): write fault (the store's write failed)
NVME_SC_READ_ERROR = 0x281          # media error (SCT 2): unrecovered read error
NVME_SC_SHORT_READ = 0x7C0          # vendor specific (SCT 7): the store returned fewer bytes
NVME_SC_SHORT_WRITE = 0x7C1         # vendor specific (SCT 7): the store took fewer bytes

# Completion word the lane that read a command's CQE leaves for the command's own lane, when
# they differ (device memory, one per command slot): bits 0-15 CID, 16-30 NVMe status, bit 40
# set once written (0 initially).
CPL_STATUS_SHIFT = 16
CPL_VALID = 1 << 40
