"""gids.console: the one progress report and the one table of every command."""
import io

from gids.console import Progress, table


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_in_a_log_is_a_plain_line_every_few_seconds_and_one_at_the_end():
    stream, clock = io.StringIO(), _Clock()
    progress = Progress("generating", stream=stream, every_s=5.0, clock=clock)
    for done in range(0, 101):                    # 100 steps of 0.1 s: 10 s in all
        clock.now = done * 0.1
        progress(done, 100)
    progress(100, 100)                            # after the end: nothing more
    text = stream.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 3                        # at 0 s, at 5 s, and at the end (10 s)
    assert lines[0].startswith("generating [") and "0/100" in lines[0]
    assert "100.0% 100/100" in lines[-1]


def test_progress_on_a_terminal_redraws_one_line_and_ends_it_once():
    stream = _Terminal()
    progress = Progress("writing", stream=stream, clock=_Clock())
    for done in range(0, 11):
        progress(done, 10, note="step")
    progress.finish()
    text = stream.getvalue()
    assert text.count("\r") == 11 and text.count("\n") == 1 and text.endswith("\n")
    assert "100.0% 10/10" in text.split("\r")[-1]


def test_progress_disabled_writes_nothing():
    stream = io.StringIO()
    progress = Progress("x", stream=stream, enabled=False)
    progress(1, 2)
    progress.finish("done")
    assert stream.getvalue() == ""


def test_table_aligns_text_left_and_numbers_right_or_writes_markdown():
    text = table(["path", "rate", "ok"], [["gids", 1.5, "yes"], ["zero_copy", 12.25, "no"]])
    assert text.splitlines() == ["path        rate   ok",
                                 "---------  -----  ---",
                                 "gids         1.5  yes",
                                 "zero_copy  12.25   no"]
    assert table(["a", "b"], [[1, 2]], markdown=True).splitlines() == [
        "| a | b |", "|---|---|", "| 1 | 2 |"]
