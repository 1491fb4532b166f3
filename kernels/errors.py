"""The exceptions gids raises (users import them from ``gids`` or ``gids.errors``). Every one
derives from :class:`GidsError` and from the builtin exception a caller would already catch for
that kind of failure. This module imports nothing: host_daemon raises these too."""


class GidsError(Exception):
    """Base class of every gids error."""


class ImportOrderError(GidsError, ImportError):
    """``numba.cuda`` was imported before ``gids`` on a machine without a GPU: Numba's CUDA
    module is then the real one, and gids can no longer choose the simulator."""


class ConfigError(GidsError, ValueError):
    """A Runtime or array parameter is invalid (checked before any kernel runs)."""


class StorageIOError(GidsError, OSError):
    """The store could not read or write a page. ``path`` and ``page`` say which."""

    def __init__(self, message, path=None, page=None):
        super().__init__(message)
        self.path = path
        self.page = page


class ReadOnlyError(GidsError, PermissionError):
    """A write to an array opened read-only (``mode="r"``, the default) or to a store that
    cannot be written."""


class IndexOutOfRangeError(GidsError, IndexError):
    """A kernel asked for an element outside the array (recorded in the kernel, raised after)."""


class GidsTimeoutError(GidsError, TimeoutError):
    """A bounded wait inside a kernel or the host ran out. ``what`` names the wait."""

    def __init__(self, message, what=None):
        super().__init__(message)
        self.what = what


class CacheExhaustedError(GidsTimeoutError):
    """No cache slot could be freed in time: more pages were in use at once than the cache has."""


class DaemonError(GidsError, RuntimeError):
    """A host daemon thread died or would not stop."""


class AbortedError(GidsError):
    """The kernels were stopped by :meth:`gids.Runtime.abort` (Ctrl-C raises KeyboardInterrupt)."""


class StaleHandleError(GidsError, RuntimeError):
    """A kernel was launched with the handle of an array whose Runtime is closed (checked
    before the launch; a kernel already running gives up its waits at once)."""


class HostTierFullError(ConfigError):
    """``rt.host_tier.add`` was given more new pages than the host tier has free slots (nothing
    was added): a larger ``host_cache_bytes``, fewer pages, or ``host_tier.clear()`` first."""


class SharedFileError(ConfigError):
    """A file already open in the Runtime was opened again where the two arrays could not share
    their cached pages (another offset, or a larger extent) and one of them is writable: each
    would keep its own copy of a page and read stale bytes after the other's writes."""


class HoldLimitError(ConfigError):
    """A :meth:`gids.Runtime.hold` would pin more pages than ``hold_fraction`` of the cache
    (nothing of it was held)."""


class NotHeldError(GidsError, LookupError):
    """A release of a hold that is not held: released already, by :meth:`gids.Runtime.release`,
    by ``invalidate``, by recovery after an error, or by another Runtime's."""


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, GidsError)]

# Users meet these as gids.errors.X (the public module re-exports them): say so in tracebacks.
for _name in __all__:
    globals()[_name].__module__ = "gids.errors"
