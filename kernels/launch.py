"""Launching a kernel with an array handle for the host cost of a few arguments, not of thirty.

Why: a handle (:mod:`kernels.handle`) is a namedtuple of about twenty device arrays and ten
integers, and numba-cuda types and marshals every field of every argument at every launch:
450-516 us of host time per launch with a handle on the H200, against 40 us for a kernel taking
one array. Launches queue faster than that on the GPU, so a run of short kernels (the bench's
hit requests, a BFS level) was bound by the host (docs/design-notes.md, "Launch cost of a
handle").

What: a handle is immutable and its arrays live as long as its Runtime, so both results are
computed once per handle object and kept in its ``__dict__`` (the handle classes subclass their
namedtuples without ``__slots__`` for this):

- its Numba type: a registration of numba-cuda's ``typeof_impl`` for the handle classes
  returns the type the tuple rule computed the first time;
- its kernel arguments (the flattened fields: for each array its meminfo, parent, size,
  itemsize, pointer, shape and strides): ``_Kernel._prepare_args`` is wrapped so that, for a
  handle, it appends the list that numba-cuda's own code produced the first time.

Nothing else changes: the same kernel is chosen and receives the same bytes (a GPU test,
``tests/test_launch.py``, compares the kept list with a fresh one). A handle whose marshalling
asked for a copy back to the host (a field in host memory, which the handle classes never
hold) is not kept, and kernels compiled with ``extensions`` take numba-cuda's own path. The
wrapped method and the registration are numba-cuda internals, pinned by ``numba-cuda>=0.30,<0.31``
in ``pyproject.toml``; where they are missing, :func:`install` leaves everything as it was and
launches cost what they cost. The simulator passes arguments as Python objects: nothing to do.

Both worlds also run a handle's launch guard (``__dict__[GUARD_KEY]``, a callable the host
side puts there) before every launch that passes the handle: the Runtime's says whether it is
still open, and raises for a closed one's handle, so that such a launch fails at once instead of
waiting out its timeouts. One dictionary look-up per handle argument, on the host.
"""
from kernels.handle import HANDLE_CLASSES
from kernels.platform import SIMULATOR

#: Keys of what is kept in a handle's ``__dict__``.
_TYPE_KEY = "_gids_numba_type"
_ARGS_KEY = "_gids_kernel_args"
#: The handle's launch guard: called with no argument before each launch that passes the
#: handle; it raises to refuse the launch.
GUARD_KEY = "_gids_launch_guard"


def check_handles(args):
    """Run the launch guard of every handle among a launch's ``args``."""
    for val in args:
        if type(val) in HANDLE_CLASSES:
            guard = val.__dict__.get(GUARD_KEY)
            if guard is not None:
                guard()


def _wrap_prepare_args(original):
    def _prepare_args(self, ty, val, stream, retr, kernelargs):
        if type(val) not in HANDLE_CLASSES:
            return original(self, ty, val, stream, retr, kernelargs)
        guard = val.__dict__.get(GUARD_KEY)
        if guard is not None:
            guard()
        if self.extensions:
            return original(self, ty, val, stream, retr, kernelargs)
        kept = val.__dict__.get(_ARGS_KEY)
        if kept is None or kept[0] != ty:
            args = []
            n_retr = len(retr)
            original(self, ty, val, stream, retr, args)
            if len(retr) == n_retr:      # nothing to copy back after the launch: keep it
                val.__dict__[_ARGS_KEY] = (ty, args)
            kernelargs.extend(args)
            return None
        kernelargs.extend(kept[1])
        return None

    _prepare_args.gids_wrapped = original
    return _prepare_args


def _typeof_handle(tuple_rule):
    def typeof_handle(val, c):
        kept = val.__dict__.get(_TYPE_KEY)
        if kept is not None and kept[0] == c.purpose:
            return kept[1]
        ty = tuple_rule(val, c)
        if ty is not None:
            val.__dict__[_TYPE_KEY] = (c.purpose, ty)
        return ty
    return typeof_handle


def install():
    """Make launches with a handle cheap (idempotent). Returns True where installed: on a GPU
    with the numba-cuda this was written for; False in the simulator or where its internals
    differ."""
    if SIMULATOR:
        return False
    try:
        from numba.cuda.dispatcher import _Kernel
        from numba.cuda.typing.typeof import _typeof_tuple, typeof_impl
    except ImportError:
        return False
    if not callable(getattr(_Kernel, "_prepare_args", None)):
        return False
    if not hasattr(_Kernel._prepare_args, "gids_wrapped"):
        _Kernel._prepare_args = _wrap_prepare_args(_Kernel._prepare_args)
        rule = _typeof_handle(_typeof_tuple)
        for cls in HANDLE_CLASSES:
            typeof_impl.register(cls)(rule)
    return True


def install_simulator_guard():
    """In the simulator: run the handles' launch guards before each launch (idempotent)."""
    from numba.cuda.simulator.kernel import FakeCUDAKernel
    original = FakeCUDAKernel.__call__
    if hasattr(original, "gids_wrapped"):
        return

    def __call__(self, *args):
        if not self._device:
            check_handles(args)
        return original(self, *args)

    __call__.gids_wrapped = original
    FakeCUDAKernel.__call__ = __call__


def installed():
    """True when :func:`install` has taken effect in this process."""
    if SIMULATOR:
        return False
    from numba.cuda.dispatcher import _Kernel
    return hasattr(_Kernel._prepare_args, "gids_wrapped")


def kept_arguments(handle):
    """The kernel arguments kept for ``handle`` (a list), or None before its first launch."""
    kept = handle.__dict__.get(_ARGS_KEY)
    return None if kept is None else kept[1]
