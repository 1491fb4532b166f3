python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GIDS_COMMIT=wip-scan
mkdir -p $OUT/ncu
NCU=/usr/local/cuda/bin/ncu
S=docs/results/2026-12-02-s8/exp/bfs_ncu.py
timeout 100 python $S --graph /tmp/k22.csr --scale 22 --path gids 2>&1 | grep -v -i warn | tail -1
for p in gids memory; do
timeout 150 $NCU --clock-control none --profile-from-start off --kernel-name regex:top_down \
   --set detailed -o $OUT/ncu/rep_$p python $S --graph /tmp/k22.csr --path $p 2>&1 | grep -v -i warn | tail -2
$NCU --import $OUT/ncu/rep_$p.ncu-rep --csv --page raw > $OUT/ncu/raw_$p.csv 2>&1
$NCU --import $OUT/ncu/rep_$p.ncu-rep --page source --csv --print-source sass > $OUT/ncu/sass_$p.csv 2>&1
done
rm -f $OUT/ncu/*.ncu-rep
cd $OUT && tar czf ncu2.tgz ncu && rm -rf ncu
