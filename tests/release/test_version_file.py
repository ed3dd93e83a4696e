"""A version file that medbench_release.record.check_version finds fault with is refused when it is looked up
(medbench_release/reproduce.py's find_record, before `medbench reproduce` pulls or rebuilds anything); one of format 1 as it was."""

from __future__ import annotations

import json

import pytest

from medbench_release.reproduce import find_record
from medbench_release.vcs import VersioningError
from tests.orchestration.operating_env import ROOT


def test_a_well_formed_version_file_is_found_and_a_broken_one_refused_naming_what_is_wrong(tmp_path):
    bundled = json.loads((ROOT / "versions" / "bundled-v1.json").read_text())
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions" / "good.json").write_text(json.dumps(bundled))
    assert find_record(tmp_path, "good") == (bundled, "versions/good.json")
    broken = {**bundled, "code_commit": "abc", "artifacts": [dict(bundled["artifacts"][0], stage="weights")] + bundled["artifacts"][1:]}
    (tmp_path / "versions" / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(VersioningError) as caught:
        find_record(tmp_path, "broken")
    assert str(caught.value).startswith(
        "versions/broken.json: not a well-formed version file: code_commit 'abc' is not a 40-hex git commit; artifacts[0] (weights "
    )
    assert str(caught.value).endswith("; nothing was pulled or changed")


def test_a_version_file_of_format_1_is_found_as_it_was(tmp_path):
    # format 1 lists no artifacts (it can only be pulled from its remote): nothing of format 2 is asked of it
    old = {"format": 1, "tag": "old", "data_version": "0" * 32}
    (tmp_path / "versions").mkdir()
    (tmp_path / "versions" / "old.json").write_text(json.dumps(old))
    assert find_record(tmp_path, "old") == (old, "versions/old.json")
