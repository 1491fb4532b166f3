python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GIDS_COMMIT=130d92b
mkdir -p $OUT/b
timeout 330 python -m workloads.gpu_session --out $OUT/b bfs-targets > $OUT/b/bfs-targets.log 2>&1
grep -A12 "data path" $OUT/b/bfs-targets.log | grep -v -i warn | tail -14
timeout 230 python -m pytest -q -m gpu -p no:cacheprovider -W ignore tests > $OUT/b/tests.log 2>&1
grep -E "passed|failed|FAILED|Error" $OUT/b/tests.log | tail -8
cd $OUT && tar czf b.tgz b && rm -rf b
