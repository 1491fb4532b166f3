#!/bin/bash
# exp/spill_lines.sh CAP: the gids top-down kernel's local loads and stores per source line
# (ptxas -lineinfo, nvdisasm --print-line-info): where in the Python the spills land.
cd /work/main
LINEINFO=1 NUMBA_ENABLE_CUDASIM=0 /tmp/venv-main/bin/python exp/spill.py gids ${1:-64} > /dev/null 2>&1
ptxas -arch=sm_90 --maxrregcount ${1:-64} -lineinfo /tmp/td_gids.ptx -o /tmp/tdl.cubin
/tmp/tw/triton/backends/nvidia/bin/nvdisasm --print-line-info -c /tmp/tdl.cubin > /tmp/tdl.sass 2>&1
python3 - <<'PY'
import re, collections
cur=None; fn=None
cnt=collections.Counter()
for line in open('/tmp/tdl.sass'):
    m=re.search(r'//## File "([^"]+)", line (\d+)', line)
    if m: cur=(m.group(1).split('/')[-1], int(m.group(2))); continue
    if re.match(r'\s*\.section\s+\.text\.', line):
        fn='top_down' if 'top_down' in line[:200] else 'other'
        continue
    if re.search(r'\bSTL', line) or re.search(r'\bLDL', line):
        cnt[(fn, cur, 'STL' if 'STL' in line else 'LDL')]+=1
for (fn,cur,op),n in sorted(cnt.items(), key=lambda x:(str(x[0][0]), str(x[0][1]), x[0][2])):
    if fn=='top_down': print(op, n, cur)
PY
