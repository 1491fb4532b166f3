"""The ``gids`` command's own subcommands in the simulator: the demo the README runs first,
and ``info``, which names the world and every setting a figure depends on."""
import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)
import pytest

from gids.cli import main
from kernels.platform import SIMULATOR


@pytest.mark.skipif(not SIMULATOR, reason="the demo's simulator sizes")
def test_demo_reads_through_a_small_cache_and_checks_every_value(capsys, tmp_path):
    assert main(["demo", "--dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CUDA simulator" in out and "all 256 values equal numpy's" in out
    assert "simulator: not a GPU figure" in out


def test_info_names_the_world_and_the_settings_read_at_import(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert ("CUDA simulator" if SIMULATOR else "GPU") in out
    for name in ("GIDS_MAX_REGISTERS=", "GIDS_POLL_NS=",
                 "GIDS_BULK_COPY_LANES=", "GIDS_HOT_QUEUE_EVERY="):
        assert name in out
