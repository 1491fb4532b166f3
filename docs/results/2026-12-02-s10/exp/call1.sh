# Session 10, call 1: the resident-first top-down step. GPU test of its deferral path, issue 5's
# targets (gpu_session bfs-targets, scale 24), then the in-process A/B (resident vs miss path
# vs GPU memory) on the same graph.
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GIDS_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo main)
mkdir -p $OUT/c
timeout 90 python -m pytest -q -m gpu tests/test_gpu.py -k resident -p no:cacheprovider 2>&1 | tail -3 | tee $OUT/c/gpu_resident.txt
timeout 330 python -m workloads.gpu_session --out $OUT/c bfs-targets > $OUT/c/bfs-targets.log 2>&1
grep -A6 "data path" $OUT/c/bfs-targets.log | grep -v -i warn | tail -14
timeout 170 python exp/bfs_resident.py --graph /tmp/gids-session-k24.csr --roots 8 --rounds 2 2>&1 | grep -v -i warn | tee $OUT/c/resident_ab.txt | tail -7
cd $OUT && tar czf c.tgz c && rm -rf c
