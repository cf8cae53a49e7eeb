"""The test lanes' scheduling (tests/conftest.py SPLIT_FILES): the tests kept together in a split file
are exactly those that use the fixture they are kept together for, so a renamed or new test cannot
quietly pay for that fixture again on another worker."""

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, SPLIT_FILES, scheduling_scope

USERS = """
import sys
import pytest

class Users:
    def pytest_collection_finish(self, session):
        for item in session.items:
            if sys.argv[2] in item.fixturenames:
                print("USER", item.originalname)

pytest.main(["--co", "-q", "-p", "no:cacheprovider", sys.argv[1]], plugins=[Users()])
"""


def fixture_users(path: Path, fixture: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "TEST_CODEGEN"}  # every test of the file, whatever the lane
    out = subprocess.run(
        [sys.executable, "-c", USERS, str(path), fixture], cwd=ROOT, capture_output=True, text=True, check=True, env=env
    ).stdout
    return {line.split()[1] for line in out.splitlines() if line.startswith("USER ")}


def test_kept_together_lists_match_the_fixture_users():
    for name, together in SPLIT_FILES.items():
        (path,) = [p for p in (Path(ROOT) / "tests").rglob(name) if "platform" not in p.parts]
        for fixture, tests in together.items():
            assert fixture_users(path, fixture) == set(tests), (name, fixture)


def test_scopes_of_whole_files_split_files_and_groups():
    assert scheduling_scope("tests/trainers/loop/test_update.py::test_x[a]") == "tests/trainers/loop/test_update.py"
    one = "tests/trainers/engine/test_batching.py::test_y[1-2]"
    assert scheduling_scope(one) == one
    grouped = "tests/trainers/rollout/test_async.py::test_max_age_0_is_the_synchronous_update"
    assert scheduling_scope(grouped) == "tests/trainers/rollout/test_async.py::sync_run"


def test_test_file_names_are_unique_across_the_tree():
    # The test folders are not packages, so pytest imports each file under its base name: two files
    # with one name fail to collect in a process that meets both ("import file mismatch"), which a
    # run of either file alone never shows. SPLIT_FILES and SLOW_FILES name files by base name too.
    names: dict[str, list[str]] = {}
    for path in (Path(ROOT) / "tests").rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
