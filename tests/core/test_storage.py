"""RELIABILITY.md test 4: a writer killed mid-write leaves readers the old or the new artifact,
never a truncated or missing one; and a manifest mismatch is refused, naming the file. What a
killed writer leaves (its temporary) is removed by the next writer of that artifact or by a sweep,
and never a live writer's (issue 29).

The writers run in subprocesses that are SIGKILLed at chosen points: in the middle of building
a folder or writing a file, and just before each rename the swap makes (an audit hook on
``os.rename``, which ``os.replace`` raises, delivers the kill).
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from medbench_core.errors import IntegrityError
from medbench_core.storage import (
    MANIFEST,
    atomic_path,
    is_complete,
    read_manifest,
    remove_abandoned_temporaries,
    replace_dir_atomic,
    verify_manifest,
    write_manifest,
)
from tests import processes

ROOT = Path(__file__).resolve().parents[2]
BIG = 4 << 20  # bytes per payload file: big enough that writing it takes many syscalls


def payload(version: int) -> bytes:
    return bytes([version % 251]) * BIG


def build_version(folder: Path, version: int) -> None:
    (folder / "payload.bin").write_bytes(payload(version))
    (folder / "version.json").write_text(json.dumps({"version": version}))
    write_manifest(folder, ["payload.bin", "version.json"], {"version": version})


def read_version(folder: Path) -> int:
    """What a careful reader does: verify the manifest, then read. Returns the version seen."""
    manifest = verify_manifest(folder)
    version = json.loads((folder / "version.json").read_text())["version"]
    assert manifest["version"] == version
    assert (folder / "payload.bin").read_bytes() == payload(version)
    return version


WRITER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    from medbench_core.storage import replace_dir_atomic, atomic_path, write_manifest

    mode, target, arg = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    BIG = 4 << 20
    if os.environ.get("NO_EXCHANGE"):  # the portable two-rename swap, as on non-Linux systems
        import medbench_core.storage.atomic as atomic
        atomic._exchange = lambda a, b: False

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if mode == "kill_at_rename":
        # Die just before the arg-th rename (audit hooks run before the operation).
        seen = [0]
        def hook(event, args):
            if event == "os.rename":
                seen[0] += 1
                if seen[0] == arg:
                    die()
        sys.addaudithook(hook)

    def build(tmp):
        with open(tmp / "payload.bin", "wb") as f:
            for i in range(64):
                f.write(bytes([2]) * (BIG // 64))
                if mode == "kill_in_build" and i == 20:
                    f.flush()
                    (target.parent / "MIDWAY").write_text("1")
                    time.sleep(60)  # the test kills us here
        (tmp / "version.json").write_text(json.dumps({"version": 2}))
        write_manifest(tmp, ["payload.bin", "version.json"], {"version": 2})

    if mode == "swap_forever":
        v = 2
        (target.parent / "STARTED").write_text("1")
        while True:
            v += 1
            def b(tmp, v=v):
                (tmp / "payload.bin").write_bytes(bytes([v % 251]) * BIG)
                (tmp / "version.json").write_text(json.dumps({"version": v}))
                write_manifest(tmp, ["payload.bin", "version.json"], {"version": v})
            replace_dir_atomic(target, b)
    elif mode == "file_write":
        with atomic_path(target) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"new" * 1000)
                f.flush()
                (target.parent / "MIDWAY").write_text("1")
                time.sleep(60)
    else:
        replace_dir_atomic(target, build)
    """
)


def start_writer(mode: str, target: Path, arg: int = 0, exchange: bool = True) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if not exchange:
        env["NO_EXCHANGE"] = "1"
    return processes.start([sys.executable, "-c", WRITER, mode, str(target), str(arg)], env=env, stderr=subprocess.PIPE)


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"writer exited early: {proc.stderr.read().decode()}"
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.01)


@pytest.fixture
def artifact(tmp_path):
    final = tmp_path / "store" / "artifact"
    replace_dir_atomic(final, lambda tmp: build_version(tmp, 1))
    assert read_version(final) == 1
    return final


def test_kill_in_the_middle_of_building_leaves_the_old_version(artifact):
    proc = start_writer("kill_in_build", artifact)
    wait_for(artifact.parent / "MIDWAY", proc)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert read_version(artifact) == 1
    (left,) = [p for p in artifact.parent.iterdir() if p.name.endswith(".tmp")]
    assert left.name.startswith(".artifact.") and (left / "payload.bin").is_file()
    # The next writer succeeds despite the debris the killed one left, and removes it.
    replace_dir_atomic(artifact, lambda tmp: build_version(tmp, 3))
    assert read_version(artifact) == 3
    assert sorted(p.name for p in artifact.parent.iterdir()) == ["MIDWAY", "artifact"]


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
@pytest.mark.parametrize("nth_rename", [1, 2, 3, 4])
def test_kill_before_each_rename_leaves_old_or_new(artifact, nth_rename, exchange):
    proc = start_writer("kill_at_rename", artifact, nth_rename, exchange)
    code = proc.wait(timeout=60)
    assert code in (0, -signal.SIGKILL), proc.stderr.read().decode()
    # Whatever rename the writer died before, a reader sees a complete version.
    seen = read_version(artifact)
    assert seen == (2 if code == 0 else seen) and seen in (1, 2)
    replace_dir_atomic(artifact, lambda tmp: build_version(tmp, 4))
    assert read_version(artifact) == 4


def snapshot(folder: Path) -> int:
    """A reader that checks the bytes it read against the manifest it read: returns the version,
    raises IntegrityError when the folder was swapped between its reads (a refusal, retried)."""
    manifest = read_manifest(folder)
    files = {name: (folder / name).read_bytes() for name in manifest["files"]}
    if any(hashlib.sha256(data).hexdigest() != manifest["files"][name]["sha256"] for name, data in files.items()):
        raise IntegrityError("swapped while reading")
    version = json.loads(files["version.json"])["version"]
    assert manifest["version"] == version and files["payload.bin"] == payload(version)
    return version


def test_readers_never_see_a_missing_or_partial_folder_while_it_is_swapped(artifact):
    proc = start_writer("swap_forever", artifact)
    try:
        wait_for(artifact.parent / "STARTED", proc)
        seen, refused, problems = set(), 0, []
        end = time.monotonic() + 3.0
        while time.monotonic() < end:
            try:
                seen.add(snapshot(artifact))
            except IntegrityError as exc:
                if "swapped while reading" not in str(exc):
                    problems.append(str(exc))  # e.g. no manifest: the folder was missing
                refused += 1
            except (FileNotFoundError, AssertionError, ValueError) as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert problems == []
        assert len(seen) > 3  # the reader really watched several swaps
        assert read_version(artifact) >= 1  # and the kill itself left a complete version
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_kill_in_the_middle_of_a_file_write_leaves_the_old_file(tmp_path):
    final = tmp_path / "metrics.json"
    final.write_bytes(b"old")
    proc = start_writer("file_write", final)
    wait_for(tmp_path / "MIDWAY", proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert final.read_bytes() == b"old"
    with atomic_path(final) as tmp:
        tmp.write_bytes(b"new")
    assert final.read_bytes() == b"new"


def test_failed_build_raises_and_keeps_the_old_version(artifact):
    def broken(tmp):
        (tmp / "payload.bin").write_bytes(b"half")
        raise RuntimeError("encoder crashed")

    with pytest.raises(RuntimeError, match="encoder crashed"):
        replace_dir_atomic(artifact, broken)
    assert read_version(artifact) == 1
    assert [p.name for p in artifact.parent.iterdir()] == ["artifact"]  # no temporary left behind


def test_manifest_mismatch_is_refused_naming_the_file(artifact):
    path = artifact / "payload.bin"
    data = path.read_bytes()

    path.write_bytes(data[:-1])  # truncated
    with pytest.raises(IntegrityError, match=rf"^{path}: size {BIG - 1} bytes, manifest says {BIG}: truncated"):
        verify_manifest(artifact)
    path.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])  # one flipped bit, same size
    with pytest.raises(IntegrityError, match=rf"^{path}: sha256 [0-9a-f]{{12}} does not match manifest [0-9a-f]{{12}}: corrupted"):
        verify_manifest(artifact)
    assert not is_complete(artifact)
    path.unlink()
    with pytest.raises(IntegrityError, match=rf"^{path}: missing \(listed in {MANIFEST}\)"):
        verify_manifest(artifact)
    with pytest.raises(IntegrityError, match=r"extra\.bin: not listed in"):
        verify_manifest(artifact, ["extra.bin"])
    (artifact / MANIFEST).write_text("{not json")
    with pytest.raises(IntegrityError, match=rf"^{artifact / MANIFEST}: manifest is not valid JSON"):
        read_manifest(artifact)
    (artifact / MANIFEST).unlink()
    with pytest.raises(IntegrityError, match=rf"^{artifact / MANIFEST}: no manifest"):
        verify_manifest(artifact)


def test_a_sweep_removes_what_killed_writers_left_and_nothing_a_live_writer_holds(artifact):
    store = artifact.parent
    report = store / "reports" / "leaderboard.md"
    report.parent.mkdir()
    report.write_text("old")
    folder_writer = start_writer("kill_in_build", artifact)
    file_writer = start_writer("file_write", report)
    try:
        wait_for(store / "MIDWAY", folder_writer)
        wait_for(store / "reports" / "MIDWAY", file_writer)
        (building,) = store.glob(".artifact.*.tmp")
        (writing,) = report.parent.glob(".leaderboard.md.*.tmp")
        # Not ours, though named alike: DVC's temporaries, a link, a name without tempfile's 8 characters.
        dvc = store / ".Qx3-k9_ZpL0aRtVw2yBn4A.tmp"
        dvc.write_text("a pull in progress")
        (store / ".other.abcdefgh.tmp").symlink_to(artifact)
        (store / ".x.tmp").write_text("")
        kept = sorted(p.name for p in store.iterdir())

        assert remove_abandoned_temporaries(store, recursive=True) == []  # both writers are alive
        assert sorted(p.name for p in store.iterdir()) == kept and building.is_dir() and writing.is_file()

        for proc in (folder_writer, file_writer):
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        assert remove_abandoned_temporaries(store, name="other") == []  # another artifact's only
        assert remove_abandoned_temporaries(store, recursive=True) == sorted([building, writing])
        assert sorted(kept) == sorted([building.name, *(p.name for p in store.iterdir())])
        assert dvc.read_text() == "a pull in progress" and report.read_text() == "old" and read_version(artifact) == 1
    finally:
        for proc in (folder_writer, file_writer):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
