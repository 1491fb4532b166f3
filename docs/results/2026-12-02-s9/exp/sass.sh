#!/bin/bash
# exp/sass.sh WHICH CAP: compile top_down (exp/spill.py) and list the kernel's SASS branches, calls,
# local memory ops and the CAS (the claim), to see which spills sit in the scanning loop.
cd /work/main
NUMBA_ENABLE_CUDASIM=0 /tmp/venv-main/bin/python exp/spill.py ${1:-gids} ${2:-64} 2>&1 | tail -1 | cut -c1-160
ptxas -arch=sm_90 --maxrregcount ${2:-64} /tmp/td_${1:-gids}.ptx -o /tmp/td.cubin
/tmp/tw/triton/backends/nvidia/bin/cuobjdump -sass /tmp/td.cubin | awk '/Function : .*top_down/{f=1;next} /Function :/{f=0} f' > /tmp/k.sass
grep -n "ATOMG.E.CAS\|CALL\|LDL\|STL\|BRA\|RET\|EXIT\|LDG" /tmp/k.sass | sed 's/\/\* 0x[0-9a-f]* \*\///; s/  */ /g' | cut -c1-90 > /tmp/k.lst
wc -l < /tmp/k.sass
