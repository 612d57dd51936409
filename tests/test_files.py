"""The one atomic writer (loadprobe/_files.py) and the writers that go through it."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from loadprobe import _files
from loadprobe._files import PendingFile, is_temporary, pending_file, write_file


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_file_is_replaced_whole_and_no_temporary_is_left(tmp_path):
    target = tmp_path / "portrait.json"
    write_file(target, "old\n")
    assert write_file(target, "new ✓\n") == target
    assert target.read_text(encoding="utf-8") == "new ✓\n"
    assert _entries(tmp_path) == ["portrait.json"]


def test_the_new_file_gets_the_permissions_a_plain_open_gives(tmp_path):
    # mkstemp would make it 0600: a report or a plan nobody else on the machine could read
    plain = tmp_path / "plain"
    plain.write_bytes(b"x")
    write_file(tmp_path / "ours", b"x", durable=True)
    assert (tmp_path / "ours").stat().st_mode == plain.stat().st_mode


def test_overwrite_false_refuses_an_existing_file_and_keeps_it(tmp_path):
    target = tmp_path / "pipeline.yaml"
    target.write_text("theirs")
    with pytest.raises(FileExistsError):
        write_file(target, "ours", overwrite=False)
    assert target.read_text() == "theirs"
    assert _entries(tmp_path) == ["pipeline.yaml"]
    write_file(tmp_path / "new.yaml", "ours", overwrite=False)
    assert (tmp_path / "new.yaml").read_text() == "ours"


def test_overwrite_false_keeps_a_file_created_while_it_wrote(tmp_path):
    target = tmp_path / "spans-00001.parquet"
    with pytest.raises(FileExistsError):
        with pending_file(target, overwrite=False) as tmp:
            tmp.write_bytes(b"ours")
            target.write_bytes(b"theirs")  # another writer, between our check and our rename
    assert target.read_bytes() == b"theirs"
    assert _entries(tmp_path) == ["spans-00001.parquet"]


def test_overwrite_false_without_hard_links_still_refuses(tmp_path, monkeypatch):
    def no_links(source, target):
        raise PermissionError(1, "hard links not supported here")

    monkeypatch.setattr(_files.os, "link", no_links)
    target = tmp_path / "align.json"
    write_file(target, "first", overwrite=False)
    with pytest.raises(FileExistsError):
        write_file(target, "second", overwrite=False)
    assert target.read_text() == "first" and _entries(tmp_path) == ["align.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "run.json"
    write_file(target, "{}\n")
    with pytest.raises(RuntimeError):
        with pending_file(target, durable=True) as tmp:
            tmp.write_text("{\"half\":")
            raise RuntimeError("the writer broke")
    assert target.read_text() == "{}\n" and _entries(tmp_path) == ["run.json"]


def test_a_missing_folder_raises_oserror_and_creates_nothing(tmp_path):
    with pytest.raises(OSError):
        write_file(tmp_path / "nope" / "plans.json", "{}")
    assert _entries(tmp_path) == []


def test_temporaries_are_hidden_beside_the_target_and_recognised(tmp_path):
    pending = PendingFile(tmp_path / "spans-00002.parquet")
    assert pending.path.parent == tmp_path and is_temporary(pending.path.name)
    assert pending.path.name.startswith(".spans-00002.parquet.") and pending.path.name.endswith(".tmp")
    assert PendingFile(tmp_path / "x").path != PendingFile(tmp_path / "x").path  # two writers never share one
    assert is_temporary(".spans-00001.parquet.tmp")  # an older loadprobe's name
    assert not is_temporary("spans-00001.parquet") and not is_temporary(".spans-00002.arrows")
    pending.discard()  # nothing written yet: nothing to remove, nothing raised


def test_durable_writes_sync_the_file_and_its_folder(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.path.realpath(f"/proc/self/fd/{fd}") if os.path.exists("/proc/self/fd") else fd)
        real_fsync(fd)

    monkeypatch.setattr(_files.os, "fsync", fsync)
    write_file(tmp_path / "plain.json", "{}")
    assert synced == []
    write_file(tmp_path / "run.json", "{}", durable=True)
    assert len(synced) == 2
    if os.path.exists("/proc/self/fd"):
        assert synced[0].startswith(str(tmp_path / ".run.json.")) and synced[1] == str(tmp_path)


def test_concurrent_writers_each_leave_a_whole_file(tmp_path):
    target = tmp_path / "portrait.json"
    texts = [str(n) * 50_000 for n in range(8)]
    threads = [threading.Thread(target=write_file, args=(target, text)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert target.read_text() in texts
    assert _entries(tmp_path) == ["portrait.json"]
