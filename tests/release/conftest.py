"""The small released version the reproduction tests share (tests/release/version_world.py), built once per session.

Building it runs the real main job and `medbench release v1` (about 45 s on a quiet machine); the
tests only ever read its origin, remote and source folder, working on clones and copies with
names of their own, so three modules share one instead of building three.
"""

from __future__ import annotations

import pytest

from tests.release.version_world import VersionWorld, build_world


@pytest.fixture(scope="session")
def world(tmp_path_factory) -> VersionWorld:
    return build_world(tmp_path_factory.mktemp("version_world"))
