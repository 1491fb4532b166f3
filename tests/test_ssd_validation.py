"""The held-out validation's rows: each cites a source and its conditions, none is a figure a
profile was fitted to, and every profile short of three rows says why."""
import pytest

from host_daemon.ssd_model import PROFILES, get_profile
from workloads.ssd_validation import HELD_OUT, NOT_FOUND, TOLERANCE, format_table, validate


def test_every_row_cites_a_source_and_conditions():
    for row in HELD_OUT:
        assert row.profile in PROFILES
        assert row.metric in ("iops", "latency_us_mean")
        assert row.value > 0 and row.n_ssd >= 1 and row.nbytes >= 1
        assert ("http" in row.source or "github" in row.source) and len(row.conditions) > 20


def test_no_row_is_a_fitted_figure():
    """A held-out row must not repeat the data-sheet figure it would then merely reproduce."""
    for row in HELD_OUT:
        published = get_profile(row.profile).published
        fitted = [f.value for f in vars(published).values() if f is not None]
        assert all(abs(row.value / value - 1) > 0.01 for value in fitted), row


def test_profiles_short_of_three_rows_say_why():
    for name in PROFILES:
        if sum(row.profile == name for row in HELD_OUT) < 3:
            assert NOT_FOUND.get(name), name


def test_the_table_reports_each_row_against_the_model():
    rows = validate(["p5800x"])
    assert len(rows) == sum(row.profile == "p5800x" for row in HELD_OUT)
    for r in rows:
        assert r["model"] > 0 and r["error"] == pytest.approx(r["model"] / r["value"] - 1)
    text = format_table(["p5800x"], rows)
    assert "kitguru" in text and "fitted to" in text and "held-out measurements missing" in text
    assert ("outside 15 %" in text) == any(abs(r["error"]) > TOLERANCE for r in rows)
