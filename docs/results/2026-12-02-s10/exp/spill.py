"""Compile the BFS top-down kernel for both readers to PTX (cc 9.0) and ask ptxas for the
registers and spills at several caps."""
import os, subprocess, sys
sys.path.insert(0, os.getcwd())
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0")
import numba.cuda.dispatcher as dispatcher
from numba import cuda, typeof, types
class _Hopper:
    compute_capability = (9, 0)
dispatcher.get_current_device = lambda: _Hopper()
import numpy as np
from tests.helpers import fake_handle
from workloads.graph.gpu_graph import read_device_array
from workloads.pager import GIDS_PAGER
from workloads.graph.gpu_bfs import make_bfs_kernels

which = sys.argv[1] if len(sys.argv) > 1 else "gids"
caps = [int(c) for c in (sys.argv[2] if len(sys.argv) > 2 else "0,64,80,128").split(",")]
h = fake_handle(np.int64)
i64, n = types.int64[::1], types.int64
src = GIDS_PAGER if which == "gids" else read_device_array
first = typeof(h) if which == "gids" else types.int64[::1]
k = make_bfs_kernels(src, None, os.environ.get("RESIDENT") == "1")
ptx, _ = cuda.compile_ptx(k.top_down.py_func, (first, i64, i64, n, i64, i64, i64, i64, n,
                          types.boolean, i64, i64, n, types.boolean, types.boolean), cc=(9, 0),
                          lineinfo=bool(os.environ.get('LINEINFO')))
path = f"/tmp/td_{which}.ptx"
open(path, "w").write(ptx.replace(".version 9.5", ".version 9.0", 1))
print(which, "ptx lines", ptx.count("\n"), "calls", ptx.count("call.uni") + ptx.count("call "),
      ".func", ptx.count(".func"))
for cap in caps:
    args = ["ptxas", "-arch=sm_90", "-v", path, "-o", "/tmp/td.cubin"]
    if cap:
        args[1:1] = ["--maxrregcount", str(cap)]
    r = subprocess.run(args, capture_output=True, text=True)
    lines = [l for l in r.stderr.splitlines() if "registers" in l or "spill" in l or "error" in l]
    print(f"cap {cap or 'none'}:", " | ".join(l.split("info    :")[-1].strip() for l in lines))
