"""The import graph between the project's files: imports go one way, workloads -> gids ->
kernels, host_daemon, and no file is part of a cycle (docs/architecture.md, "Layout").

Every import is collected with ``ast``, at module level and inside functions. Importing
``p.q.m`` runs ``p/__init__.py`` and ``p/q/__init__.py`` first: those count as imported too
(from outside the package), which is how ``kernels -> gids.layout`` once closed a cycle through
``gids/__init__.py``.
"""
import ast
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("kernels", "host_daemon", "gids", "workloads")
#: Higher imports lower, never the other way. kernels and host_daemon are side by side.
LAYER = {"kernels": 0, "host_daemon": 0, "gids": 1, "workloads": 2}
#: The modules of kernels below every layer: they import nothing from the project but each
#: other, and host_daemon imports nothing else of kernels (``kernels/__init__.py``, which runs
#: first, imports nothing).
LEAVES = {"kernels/layout.py", "kernels/settings.py", "kernels/errors.py", "kernels/__init__.py"}
#: The CLI finds the workloads' subcommands lazily: imports inside its functions only.
LAZY_UPWARD = {"gids/cli.py"}


def _project_files():
    files = []
    for package in PACKAGES:
        for folder, _, names in os.walk(os.path.join(ROOT, package)):
            files += [os.path.relpath(os.path.join(folder, n), ROOT).replace(os.sep, "/")
                      for n in names if n.endswith(".py")]
    return sorted(files)


FILES = _project_files()


def _file_of(module):
    """The project file of a dotted module name, or None (not ours)."""
    path = module.replace(".", "/")
    for candidate in (path + ".py", path + "/__init__.py"):
        if candidate in FILES:
            return candidate
    return None


def _package_of(path):
    """The dotted package a file's relative imports start from."""
    parts = path[:-3].split("/")
    return ".".join(parts[:-1])


def imports_of(path):
    """``(imported file, inside a function)`` for every import of a project file in ``path``."""
    with open(os.path.join(ROOT, path)) as f:
        tree = ast.parse(f.read(), path)
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            targets = []
            if isinstance(child, ast.Import):
                targets = [_file_of(a.name) for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    package = _package_of(path).split(".")
                    package = package[:len(package) - (child.level - 1)]
                    base = ".".join(package + ([base] if base else []))
                for a in child.names:
                    # ``from p import m``: the submodule m if there is one, else p itself.
                    targets.append(_file_of(f"{base}.{a.name}") or _file_of(base))
            for t in targets:
                if t is not None:
                    found.extend([(t, in_function)] + [(i, in_function) for i in _inits_run_by(path, t)])
            visit(child, nested)

    visit(tree, False)
    return sorted({edge for edge in found if edge[0] != path})


def _inits_run_by(path, target):
    """The package ``__init__`` files that importing ``target`` from ``path`` runs first: those
    of its packages that do not hold ``path`` (those are running already)."""
    parts = target.split("/")[:-1]
    inits = ["/".join(parts[:k]) + "/__init__.py" for k in range(1, len(parts) + 1)]
    return [i for i in inits if i in FILES and not path.startswith(i[:-len("__init__.py")])]


GRAPH = {path: imports_of(path) for path in FILES}


def _top(path):
    return path.split("/")[0]


def test_the_graph_is_collected():
    # A check on the collector itself: edges it must see, at module level and in functions.
    assert ("kernels/layout.py", False) in GRAPH["kernels/cache.py"]
    assert any(t == "workloads/graph/gpu_bfs.py" for t, _ in GRAPH["workloads/graph/gpu_graph.py"])
    assert any(t.startswith("gids/") for t, inner in GRAPH["gids/runtime.py"] if inner)


def test_no_upward_import():
    upward = [f"{src} -> {dst}" + (" (in a function)" if inner else "")
              for src, edges in GRAPH.items() for dst, inner in edges
              if LAYER[_top(dst)] > LAYER[_top(src)] and not (inner and src in LAZY_UPWARD)]
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_kernels_and_host_daemon_meet_only_in_the_leaves():
    wrong = []
    for src, edges in GRAPH.items():
        for dst, _ in edges:
            if src in LEAVES and dst not in LEAVES:
                wrong.append(f"{src} -> {dst} (a leaf imports only the other leaves)")
            elif _top(src) == "kernels" and _top(dst) == "host_daemon":
                wrong.append(f"{src} -> {dst} (device code imports no host code)")
            elif _top(src) == "host_daemon" and _top(dst) == "kernels" and dst not in LEAVES:
                wrong.append(f"{src} -> {dst} (host code imports no device code)")
    assert not wrong, "\n".join(wrong)


def test_workloads_use_public_names():
    # Workloads reach the library through gids (gids.device, gids.host), not its internals.
    private = [f"{src} -> {dst}" for src, edges in GRAPH.items() if _top(src) == "workloads"
               for dst, _ in edges
               if _top(dst) in ("kernels", "host_daemon") or os.path.basename(dst).startswith("_")
               and not dst.endswith("__init__.py")]
    assert not private, "workloads importing internals:\n" + "\n".join(private)


def test_no_cycle_between_files():
    state = {}   # path -> 1 while on the current path, 2 when done
    cycles = []

    def walk(path, stack):
        state[path] = 1
        stack.append(path)
        for dst, _ in GRAPH[path]:
            if state.get(dst) == 1:
                cycles.append(" -> ".join(stack[stack.index(dst):] + [dst]))
            elif dst not in state:
                walk(dst, stack)
        stack.pop()
        state[path] = 2

    for path in FILES:
        if path not in state:
            walk(path, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


@pytest.mark.parametrize("first", ["host_daemon.trace", "host_daemon.daemon", "kernels.layout",
                                   "kernels.settings", "workloads.graph.gpu_bfs"])
def test_any_module_imports_first(first):
    # A module of a lower layer imported before gids (no cycle through gids/__init__).
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    script = f"import {first}\nimport gids\nassert callable(gids.Runtime) and gids.read\n"
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
