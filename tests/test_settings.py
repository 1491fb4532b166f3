"""The one settings surface (kernels/settings.py, seen as gids.defaults): every GIDS_* variable
is read there and nowhere else, once; run-time settings change in a ``with`` block."""
import ast
import os
import re
import subprocess
import sys
import warnings

import pytest

import gids
from kernels import settings
from tests.test_imports import FILES, ROOT

SETTINGS_FILE = "kernels/settings.py"


def _reads_of_environment(tree):
    """The keys that the code reads from the environment (``os.environ[...]``,
    ``os.environ.get(...)``, ``os.getenv(...)``, ``... in os.environ``): each a string, or None
    where the key is not a constant (then which variable it reads cannot be told)."""
    def is_environ(node):
        return isinstance(node, ast.Attribute) and node.attr == "environ"

    keys = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and is_environ(node.value) and \
                isinstance(node.ctx, ast.Load):
            keys.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args \
                and ((node.func.attr in ("get", "pop") and is_environ(node.func.value))
                     or node.func.attr == "getenv"):
            keys.append(node.args[0])
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            keys.append(node.left)
    return [k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
            for k in keys]


def test_no_gids_variable_is_read_outside_the_settings_module():
    readers = []
    for path in FILES + [f"tests/{n}" for n in os.listdir(os.path.join(ROOT, "tests"))
                         if n.endswith(".py")]:
        if path == SETTINGS_FILE:
            continue
        with open(os.path.join(ROOT, path)) as f, warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)       # a file's odd escapes
            warnings.simplefilter("ignore", DeprecationWarning)  # are not this test's business
            tree = ast.parse(f.read(), path)
        readers += [f"{path}: {key or 'a variable named at run time'}"
                    for key in _reads_of_environment(tree) if key is None or key.startswith("GIDS_")]
    assert not readers, "GIDS_* read outside kernels/settings.py:\n" + "\n".join(readers)


def test_the_check_finds_reads():
    tree = ast.parse('import os\nos.environ.get("GIDS_X", "1")\nos.environ["GIDS_Y"]\n'
                     'os.getenv("GIDS_Z")\n"GIDS_W" in os.environ\nos.environ["GIDS_V"] = "1"\n'
                     'os.environ.get(name)\n')
    assert _reads_of_environment(tree) == ["GIDS_X", "GIDS_Y", "GIDS_Z", "GIDS_W", None]


def test_the_table_documents_every_setting():
    # The module's docstring lists each setting with its variable and when it applies.
    doc = settings.__doc__
    for name in settings.all_settings():
        line = re.search(rf"``{name}`` \((GIDS_\w+), (run|import);", doc)
        assert line, f"{name} is not in kernels/settings.py's table"
        assert line.group(1) == settings.env_name(name)
        assert line.group(2) == settings.when(name)
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        architecture = f.read()
    for name in settings.all_settings():
        assert f"`{settings.env_name(name)}`" in architecture, f"{name} not in docs/architecture.md"


def test_run_time_settings_change_in_a_block():
    assert gids.defaults.get is settings.get
    before = settings.all_settings()
    with gids.defaults.set(timeout=1.5, commit="abc"):
        assert settings.get("timeout") == 1.5 and gids.defaults.get("commit") == "abc"
    assert settings.all_settings() == before
    with pytest.raises(gids.ConfigError, match="GIDS_BULK_COPY_LANES"):
        with gids.defaults.set(bulk_copy_lanes=0):
            pass
    with pytest.raises(KeyError):
        with gids.defaults.set(no_such_setting=1):
            pass


def _in_a_process(env, script):
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("GIDS_")},
               NUMBA_ENABLE_CUDASIM="1", **env)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)


def test_environment_sets_them_once():
    script = ("import gids\n"
              "from kernels import platform\n"
              "from host_daemon import daemon\n"
              "print(gids.defaults.get('page_size'), gids.defaults.get('timeout'),\n"
              "      platform.BULK_COPY_LANES, platform.POLL_FIRST_NS, platform.MAX_REGISTERS,\n"
              "      daemon.HOT_QUEUE_EVERY)\n")
    run = _in_a_process({"GIDS_PAGE_SIZE": "8192", "GIDS_TIMEOUT": "2.5",
                         "GIDS_BULK_COPY_LANES": "0", "GIDS_POLL_NS": "0,512,4096",
                         "GIDS_MAX_REGISTERS": "0", "GIDS_HOT_QUEUE_EVERY": "7"}, script)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["8192", "2.5", "0", "0", "None", "7"]


@pytest.mark.parametrize("variable, value", [("GIDS_SIM_WARP_SIZE", "16"),
                                             ("GIDS_POLL_NS", "1,2"),
                                             ("GIDS_PAGE_SIZE", "big")])
def test_a_bad_value_is_one_clear_error(variable, value):
    run = _in_a_process({variable: value}, "import gids")
    assert run.returncode != 0
    assert f"ConfigError: gids: {variable}={value!r}" in run.stderr


@pytest.mark.parametrize("text, value", [("auto", "auto"), ("1", True), ("0", False)])
def test_rows_resident_first_is_auto_or_a_flag(text, value):
    default, parse, _ = settings._TABLE["rows_resident_first"]
    assert default == "auto"   # two launches for large gathers only (the settings table)
    assert parse(text) == value and type(parse(text)) is type(value)
