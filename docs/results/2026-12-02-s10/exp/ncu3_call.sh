# Session 10: Nsight Compute over one warm scale-22 search's top-down launches, GPU memory and
# the resident-first gids kernels (cfd78c6); raw CSVs only (exp/ncu_summary.py reads them).
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p $OUT/ncu
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 100 python exp/bfs_ncu.py --graph /tmp/k22.csr --scale 22 --path memory 2>&1 | grep -v -i warn | tail -1
for p in memory gids; do
  timeout 150 $NCU --clock-control none --profile-from-start off --kernel-name regex:top_down \
     --set detailed -o $OUT/ncu/rep_$p python exp/bfs_ncu.py --graph /tmp/k22.csr --path $p 2>&1 | grep -v -i warn | grep -v "^==PROF==" | tail -2
  $NCU --import $OUT/ncu/rep_$p.ncu-rep --csv --page raw | gzip > $OUT/ncu/cfd78c6_raw_$p.csv.gz
  rm -f $OUT/ncu/rep_$p.ncu-rep
done
python exp/ncu_summary.py $OUT/ncu/cfd78c6_raw_*.csv.gz
