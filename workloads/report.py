"""What a ``gids bench`` sweep with a report of its own writes: the command line that ran it,
and its JSON and markdown tables."""
import json
import os
import shlex
import sys


def command_line(args):
    """The command as typed (``args.command`` where a caller set one)."""
    return getattr(args, "command", None) or " ".join(
        ["gids"] + [shlex.quote(a) for a in sys.argv[1:]])


def write_report(args, stem, result, table):
    """``STEM.json`` and ``STEM.md`` into ``args.out`` when given; the JSON to stdout with
    ``--json``, else the table. Returns the exit status: 0 when every row is correct."""
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, f"{stem}.json"), "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, f"{stem}.md"), "w") as f:
            f.write(table)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(table, end="")
    return 0 if all(r.get("correct") for r in result["rows"]) else 1
