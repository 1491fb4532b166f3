"""``--ssd`` and ``--n-ssd``: real-time SSD emulation for the demos' gids rows.

``gids bfs``, ``gids cc`` and ``gids search`` take the same two options, parsed here: with
``--ssd PROFILE`` every data path that runs a :class:`gids.Runtime` (the host daemon's ``gids``
and the direct NVMe path's ``nvme``) runs once more per drive count of ``--n-ssd``, its
completions posted no earlier than an array of that many modelled drives says
(``Runtime(ssd=PROFILE, n_ssd=N)``; profiles in ``docs/ssd_models.md``). The rows without
emulation stay in the table, so each emulated row sits next to the same run unthrottled.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

import gids

#: Drive counts run when ``--ssd`` is given without ``--n-ssd`` (issue 5: "1 and 4 modelled SSDs").
DEFAULT_DRIVE_COUNTS = (1, 4)

#: The line the demos print under a table that has emulated rows.
EMULATION_NOTE = ("SSDs: rows with an array ran under real-time emulation of that many modelled "
                  "drives (each completion no earlier than the model allows; docs/ssd_models.md); "
                  "'-': completions as soon as the page is read")


@dataclass(frozen=True)
class Emulation:
    """One emulated SSD array: ``n_ssd`` drives of ``profile``.

    Attributes
    ----------
    profile : str
        A name of ``gids.ssd_profiles()``.
    n_ssd : int
        Drives the pages are striped over.
    """

    profile: str
    n_ssd: int

    @property
    def runtime_options(self) -> dict:
        """The :class:`gids.Runtime` keyword arguments that emulate this array."""
        return {"ssd": self.profile, "n_ssd": self.n_ssd}

    @property
    def label(self) -> str:
        """What tables print, e.g. ``"4 x p5800x"``."""
        return f"{self.n_ssd} x {self.profile}"

    def as_json(self) -> dict:
        """``{"ssd": profile, "n_ssd": drives}``: how the demos' JSON records name the array."""
        return {"ssd": self.profile, "n_ssd": self.n_ssd}


def emulation_record(emulation: Emulation | None) -> dict | None:
    """A row's ``emulation`` in the demos' JSON: ``{"ssd", "n_ssd"}``, or None (not emulated)."""
    return None if emulation is None else emulation.as_json()


def emulation_cell(record: dict | None) -> str:
    """A row's SSDs cell in the demos' tables, from its :func:`emulation_record`."""
    return "-" if record is None else Emulation(record["ssd"], record["n_ssd"]).label


def engine_record(runtime, storage) -> dict:
    """A row's ``engine`` and ``engine_depth`` in the demos' JSON: the storage engine that read
    the file (``io_uring`` or ``threads``: ``runtime.daemon.engine``) for a Runtime over a file
    store, and the reads each daemon thread of it keeps in flight (its ring's entries for
    ``io_uring``, 1 for ``threads``); ``memory`` for data in RAM (a memory or mmap store: the
    daemon copies, whatever its engine) and ``-`` for a path that reads a file without a
    Runtime, both with no depth (None)."""
    if storage != "file" or runtime is None:
        return {"engine": "memory" if storage != "file" else "-", "engine_depth": None}
    daemon = runtime.daemon
    return {"engine": daemon.engine, "engine_depth": daemon.capacity // daemon.n_threads}


def engine_cell(record: dict) -> str:
    """A row's engine cell in the demos' tables, from its :func:`engine_record`: the engine,
    with the ring's depth for ``io_uring`` (``io_uring/256``; ``threads`` has one read in
    flight per thread)."""
    depth = record["engine_depth"]
    return record["engine"] if depth is None or depth == 1 else f"{record['engine']}/{depth}"


def positive_ints(text: str, what: str) -> list[int]:
    """Comma-separated integers, each at least 1 (an argparse type's body; the demos' list
    options). ``what`` names them in the error: "not a list of {what}", "{what} must be ..."."""
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of {what}: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{what} must be integers >= 1: {text!r}")
    return values


def drive_counts(text: str) -> list[int]:
    """``--n-ssd``'s type: comma-separated drive counts, each at least 1, in the order given."""
    return list(dict.fromkeys(positive_ints(text, "drive counts")))   # a count given twice runs once


def add_ssd_arguments(parser, runs: str = "the gids and nvme data paths",
                      n_ssd_also: str = "") -> None:
    """Add ``--ssd PROFILE`` and ``--n-ssd LIST`` to an ``argparse`` parser (or group).

    ``runs`` names, in the help, what runs again under emulation; ``n_ssd_also`` ends
    ``--n-ssd``'s help (what else of the command reads it). Read them back with
    :func:`emulations`.
    """
    profiles = gids.ssd_profiles()
    parser.add_argument("--ssd", choices=profiles, metavar="PROFILE",
                        help=f"run {runs} again, once per --n-ssd drive "
                             f"count, under real-time emulation of this SSD model, one of "
                             f"{', '.join(profiles)} (docs/ssd_models.md); their unemulated "
                             "rows stay, so the table shows both; the SSDs column and each "
                             "JSON record's emulation say which rows are emulated")
    parser.add_argument("--n-ssd", type=drive_counts, metavar="LIST",
                        help="with --ssd: comma-separated drive counts of the emulated array, "
                             "one run each (default "
                             f"{','.join(str(n) for n in DEFAULT_DRIVE_COUNTS)})" + n_ssd_also)


def emulations(args, runtime_paths: bool = True) -> list[Emulation]:
    """The emulated arrays ``--ssd`` / ``--n-ssd`` ask for: none without ``--ssd``.

    Parameters
    ----------
    args : argparse.Namespace
        With ``ssd`` and ``n_ssd`` (:func:`add_ssd_arguments`).
    runtime_paths : bool
        Whether the command runs a data path that reads through a Runtime (gids, nvme): the
        only ones emulation applies to.

    Raises
    ------
    ValueError
        ``--n-ssd`` without ``--ssd`` (there is no profile to emulate), or ``--ssd`` with no
        gids or nvme data path to emulate it under.
    """
    if args.ssd is None:
        if args.n_ssd is not None:
            raise ValueError("--n-ssd needs --ssd PROFILE (the drive model to emulate)")
        return []
    if not runtime_paths:
        raise ValueError("--ssd emulates the drives of the gids and nvme data paths; "
                         "--data-path has neither")
    counts = args.n_ssd or DEFAULT_DRIVE_COUNTS
    return [Emulation(args.ssd, n) for n in counts]


def runtime_emulation(runtime) -> Emulation | None:
    """The array a Runtime emulates (``Runtime(ssd=..., n_ssd=...)``), or None."""
    model = runtime.ssd_model
    return None if model is None else Emulation(model.profile.name, model.n_ssd)
