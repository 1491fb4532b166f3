"""workloads.gpu_tests: one pytest process per file, each within its limit, counts parsed."""

from workloads import gpu_tests


def test_counts_from_pytest_summaries():
    assert gpu_tests.counts("..F\n2 passed, 1 failed, 3 deselected in 1.0s\n") == {
        "passed": 2, "failed": 1, "deselected": 3}
    assert gpu_tests.counts("1 passed, 1 error in 2s") == {"passed": 1, "error": 1}
    assert gpu_tests.counts("nothing here") == {}


def test_each_file_in_its_own_process_within_its_limit(tmp_path, monkeypatch):
    # The files' processes load no pytest plugins (hypothesis alone takes a second to import):
    # the two that end do so well within a short limit, which is what the hanging one waits.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    ok = tmp_path / "test_ok.py"
    ok.write_text("import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    pass\n\n"
                  "@pytest.mark.gpu\ndef test_b():\n    pass\n\ndef test_not_gpu():\n    pass\n")
    bad = tmp_path / "test_bad.py"
    bad.write_text("import pytest\n\n@pytest.mark.gpu\ndef test_a():\n    assert False\n")
    hang = tmp_path / "test_hang.py"
    hang.write_text("import time\nimport pytest\n\n@pytest.mark.gpu\ndef test_a():\n"
                    "    time.sleep(60)\n")
    rows = gpu_tests.run([str(ok), str(bad), str(hang)], str(tmp_path / "out"), jobs=3,
                         timeout=8, log=lambda line: None)
    by = {r["file"].rsplit("/", 1)[-1]: r for r in rows}
    assert by["test_ok.py"]["exit"] == 0 and by["test_ok.py"]["passed"] == 2
    assert by["test_bad.py"]["exit"] == 1 and by["test_bad.py"]["failed"] == 1
    assert by["test_hang.py"]["exit"] == "timeout" and by["test_hang.py"]["seconds"] < 20
    assert (tmp_path / "out" / "test_ok.txt").exists()


def test_the_default_files_have_a_gpu_mark_and_the_slow_go_first():
    files = gpu_tests.gpu_test_files()
    assert files[0].endswith("test_gpu.py") and "tests/test_host_tier.py" in files


def test_command_line_refuses_a_missing_file(capsys):
    import pytest
    with pytest.raises(SystemExit) as info:
        gpu_tests.main(["tests/no_such_test.py", "--out", "/tmp/x"])
    assert info.value.code == 2 and "no such test file" in capsys.readouterr().err
