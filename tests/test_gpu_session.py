"""``python -m workloads.gpu_session``: every command of every stage parses (a typo found here
costs nothing; found on the lent GPU it costs a call of its device time). Nothing runs."""
import sys

import pytest

import gids  # noqa: F401  (first: picks the simulator before numba.cuda loads)

# isort: split
from gids.cli import build_parser as gids_parser
from workloads import bench, gpu_tests, microbench, stress, stripe_bench
from workloads.gpu_session import GIDS, STAGES
from workloads.ssd_options import emulations


def _parse(argv):
    """Parse one stage command with its program's own parser; returns what ran the parse."""
    while argv[0] == "env":                       # env NAME=value ... command
        argv = argv[1:]
        while "=" in argv[0]:
            argv = argv[1:]
    assert argv[0] == sys.executable, argv
    if argv[:len(GIDS)] == GIDS:
        args = gids_parser().parse_args(argv[len(GIDS):])
        own = {"files", "prefetch"}                   # sweeps with their own options
        if args.cmd == "bench" and not own & set(args.sweeps):   # its sweeps and workloads
            options = {k: getattr(args, k) for k in bench._CONFIG_ARGS
                       if getattr(args, k, None) is not None}
            options["emulations"] = emulations(args)     # --ssd / --n-ssd: the tier sweep's
            bench.make_config(quick=args.quick, sweeps=list(args.sweeps) or ["all"],
                              **options)
        return "gids"
    module, args = argv[2], argv[3:]
    if module == "workloads.microbench":
        microbench.build_parser().parse_args(args)
    elif module == "workloads.stress":
        stress.parse_args(args)
    elif module == "workloads.stripe_bench":
        stripe_bench.build_parser().parse_args(args)
    elif module == "workloads.gpu_tests":
        gpu_tests.build_parser().parse_args(args)
    else:
        raise AssertionError(f"no parser known for {module}")
    return module


@pytest.mark.parametrize("stage", list(STAGES))
def test_every_stage_command_parses(stage, tmp_path):
    commands, limit = STAGES[stage]
    assert 0 < limit <= 600                       # the device tool's limit per call
    for command in commands:
        command, cap = command if isinstance(command, tuple) else (command, None)
        assert cap is None or 0 < cap <= limit
        _parse([part.replace("{dir}", str(tmp_path)) for part in command])


def test_every_estimate_is_within_its_stage_limit():
    from workloads.gpu_session import ESTIMATES, estimate_line
    assert set(ESTIMATES) <= set(STAGES)
    for stage, seconds in ESTIMATES.items():
        assert 0 < seconds <= STAGES[stage][1], stage
    assert estimate_line("gnn22-ssd") == "== gnn22-ssd (expected ~150 s, limit 240 s)"
    assert estimate_line("core").endswith("(limit 540 s)")
