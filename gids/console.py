"""What the commands print: progress on stderr and tables on stdout, one way for every command.

A progress bar is redrawn in place only on a terminal; written to a file or a pipe (a log) it
is a plain line at most every :data:`PLAIN_EVERY_S` seconds, and one at the end, so a log holds
a few lines, not thousands of ``\\r`` frames.
"""
import sys
import time

#: Seconds between two plain progress lines when the stream is not a terminal.
PLAIN_EVERY_S = 5.0


def say(text, stream=None):
    """One line on stderr (what a command reports while it works), flushed at once."""
    print(text, file=stream if stream is not None else sys.stderr, flush=True)


class Progress:
    """A progress report of one task on ``stream`` (default stderr).

    Call it as ``progress(done, total)`` (the ``progress`` callbacks of the graph, vector and
    importer functions take that form) or ``progress(done, total, note)`` with a word on the
    step now running. On a terminal it redraws one bar; elsewhere it writes a plain line at most
    every ``every_s`` seconds and a last one when ``done`` reaches ``total``. Nothing is written
    after that last line, or at all with ``enabled=False``.
    """

    def __init__(self, label, stream=None, width=30, every_s=PLAIN_EVERY_S, enabled=True,
                 clock=time.monotonic):
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.every_s = every_s
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._clock = clock
        self._start = clock()
        self._last_plain = None
        self._finished = False

    def _line(self, done, total, note):
        frac = min(done / total, 1.0) if total else 1.0
        secs = self._clock() - self._start
        bar = "#" * int(self.width * frac)
        count = f" {done:,}/{total:,}" if isinstance(done, int) and isinstance(total, int) else ""
        tail = f" {note}" if note else ""
        return f"{self.label} [{bar:<{self.width}}] {frac:6.1%}{count} {secs:4.0f}s{tail}"

    def __call__(self, done, total, note=""):
        if not self.enabled or self._finished:
            return
        last = total > 0 and done >= total
        if self.tty:
            # Pad over a longer previous frame (the note may shrink).
            self.stream.write("\r" + self._line(done, total, note).ljust(79))
            if last:
                self.stream.write("\n")
        else:
            now = self._clock()
            due = self._last_plain is None or now - self._last_plain >= self.every_s
            if not (due or last):
                return
            self._last_plain = now
            self.stream.write(self._line(done, total, note) + "\n")
        self.stream.flush()
        self._finished = last

    def finish(self, note=""):
        """End the report (a last line if :meth:`__call__` never reached ``total``)."""
        if self.enabled and not self._finished:
            self._finished = True
            if self.tty:
                self.stream.write("\n")
                self.stream.flush()
            elif note:
                self.stream.write(f"{self.label}: {note}\n")
                self.stream.flush()


def table(header, rows, left=(0,), markdown=False):
    """Rows as aligned text columns (a header, a rule, the rows), or as a Markdown table.

    Parameters
    ----------
    header : list of str
    rows : list of list
        Cells (``str()`` is applied); every row as long as ``header``.
    left : collection of int
        Columns aligned left (default: the first); the others right, as numbers read best.
    markdown : bool
        ``| a | b |`` rows under a ``|---|---|`` rule, for a ``.md`` report.
    """
    rows = [[str(c) for c in r] for r in rows]
    header = [str(h) for h in header]
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
                         + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
