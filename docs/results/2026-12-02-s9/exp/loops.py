"""Loops of a SASS listing (cuobjdump -sass of one function): for each backward branch, the
range it closes and the local-memory ops, calls and atomics inside (to find spills in hot loops)."""
import re, sys
ins = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if m:
        ins.append((int(m.group(1), 16), m.group(2)))
loops = []
for a, t in ins:
    m = re.search(r"\bBRA(?:\.\w+)*\s+(?:!?U?P\d, )?(?:`\()?0x([0-9a-f]+)", t)
    if m and "BRA.DIV" not in t:
        tgt = int(m.group(1), 16)
        if tgt <= a:
            loops.append((tgt, a))
for lo, hi in sorted(set(loops)):
    body = [t for a, t in ins if lo <= a <= hi]
    c = lambda k: sum(1 for t in body if re.search(k, t))
    print(f"loop {lo:#07x}-{hi:#07x} {len(body):5d} ins  LDL {c(r'LDL'):3d} STL {c(r'STL'):3d} "
          f"CALL {c(r'CALL'):2d} CAS {c(r'ATOMG.*CAS'):2d} ATOM {c(r'ATOMG|RED'):2d} LDG {c(r'LDG'):3d}")
