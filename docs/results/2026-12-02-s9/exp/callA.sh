python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GIDS_COMMIT=${GIDS_COMMIT:-wip}
mkdir -p $OUT/a
timeout 150 python -m workloads.microbench latency --out $OUT/a/lat 2>&1 | grep -v -i warn | tail -8
timeout 240 python -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 | grep -v -i warn | tail -15 > $OUT/a/tests.log; tail -6 $OUT/a/tests.log
timeout 200 python exp/bfs_caps.py --graph /tmp/k23.csr --scale 23 --roots 8 --rounds 2 2>&1 | grep -v -i warn | tee $OUT/a/caps23.txt | tail -14
