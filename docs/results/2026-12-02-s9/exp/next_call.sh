# The next session's first call (prepared 2026-12-02, not run): copy this folder to exp/, then
#   run(command="bash exp/next_call.sh", carry=[".whl", "exp"])   (~6 min)
# 1. zero-copy and GPU memory at main's plain-reader scan (segments cut at 1,024 entries)
#    against 130d92b's (no cuts), and the gids whole-cache path at main against the unmeasured
#    next/list-spills branch (its vertex and list end read again after the scan's calls);
# 2. issue 5's targets side by side (gpu_session bfs-targets, scale 24).
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl 2>/dev/null
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 GIDS_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo main)
mkdir -p $OUT/n
timeout 240 python exp/bfs_variants.py --graph /tmp/k23.csr --scale 23 --roots 8 --rounds 2 \
    --paths memory,zero_copy,gids --variant main=exp/v_main.py --variant s9=exp/v_130d92b.py \
    --variant spills=exp/v_list_spills.py 2>&1 | grep -v -i warn | tee $OUT/n/variants23.txt | tail -12
timeout 330 python -m workloads.gpu_session --out $OUT/n bfs-targets > $OUT/n/bfs-targets.log 2>&1
grep -A6 "data path" $OUT/n/bfs-targets.log | grep -v -i warn | tail -14
cd $OUT && tar czf n.tgz n && rm -rf n
