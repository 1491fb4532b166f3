"""Per-launch summary of Nsight Compute raw CSVs (``ncu --import R --csv --page raw``) of the
top-down launches of one BFS search: duration, registers, instructions, spill instructions,
local stores, L2 write sectors. Usage: python ncu_summary.py RAW.csv[.gz] ..."""
import csv
import gzip
import sys

KEYS = [("gpu__time_duration.sum", "duration"), ("launch__registers_per_thread", "registers"),
        ("smsp__inst_executed.sum", "instructions"),
        ("sass__inst_executed_register_spilling", "spill instructions"),
        ("smsp__sass_inst_executed_op_local_st.sum", "local stores"),
        ("lts__t_sectors_srcunit_tex_op_write.sum", "L2 write sectors"),
        ("launch__grid_size", "blocks")]

for path in sys.argv[1:]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    hdr, units, data = rows[0], rows[1], rows[2:]
    print(f"== {path} ({len(data)} launches, one per level)")
    for key, name in KEYS:
        i = hdr.index(key)
        print(f"{name:20s} {units[i][:7]:7s} " + " ".join(f"{d[i]:>14s}" for d in data))
