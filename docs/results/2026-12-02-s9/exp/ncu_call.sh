python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GIDS_COMMIT=affb43c
mkdir -p $OUT/ncu
uname -r > $OUT/ncu/env.txt
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU" >> $OUT/ncu/env.txt; $NCU --version >> $OUT/ncu/env.txt 2>&1
cat $OUT/ncu/env.txt
S=docs/results/2026-12-02-s8/exp/bfs_ncu.py
timeout 120 python $S --graph /tmp/k22.csr --scale 22 --path memory 2>&1 | grep -v -i warn | tail -2
for p in memory gids; do
  timeout 200 $NCU --clock-control none --profile-from-start off --kernel-name regex:top_down \
     --set detailed -o $OUT/ncu/rep_$p python $S --graph /tmp/k22.csr --path $p 2>&1 | grep -v -i warn | tail -4
  $NCU --import $OUT/ncu/rep_$p.ncu-rep --csv --page details > $OUT/ncu/details_$p.csv 2>&1
  $NCU --import $OUT/ncu/rep_$p.ncu-rep --csv --page raw > $OUT/ncu/raw_$p.csv 2>&1
  $NCU --import $OUT/ncu/rep_$p.ncu-rep --page source --csv --print-source sass > $OUT/ncu/sass_$p.csv 2>&1 | tail -2
done
ls -la $OUT/ncu
cd $OUT && tar czf ncu.tgz ncu && rm -rf ncu
