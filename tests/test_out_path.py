"""The paths Herald's commands write (herald_service/out_path.py): an existing file --overwrite cannot replace is
refused before any work, and results are written whole or not at all."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from herald_service import out_path
from herald_service.out_path import refuse_an_existing_out, write_text_atomically


@pytest.fixture(params=["results.json"])
def unwritable(tmp_path: Path, request):
    """A file (named by the param) in a writable folder that cannot be written: immutable for root (``chattr +i``),
    read-only otherwise."""
    path = tmp_path / request.param
    path.write_text("{}\n")
    if os.geteuid() != 0:
        path.chmod(0o444)
        yield path
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("root, and this file system cannot make a file immutable (chattr +i): no unwritable file to test")
    try:
        yield path
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def test_overwrite_of_a_file_that_cannot_be_written_is_refused_before_any_work(unwritable: Path):
    # tester finding: eval --out FILE --overwrite over an immutable file started extracting states, to fail at the end
    with pytest.raises(ValueError) as refused:
        refuse_an_existing_out(unwritable, overwrite=True)
    assert str(refused.value).startswith(f"--out {unwritable} cannot be replaced (")
    assert str(refused.value).endswith("); make it writable or choose another path")
    assert unwritable.read_text() == "{}\n"
    with pytest.raises(ValueError, match="already exists"):  # without --overwrite: the usual refusal
        refuse_an_existing_out(unwritable, overwrite=False)


def test_results_are_written_whole_with_a_new_file_s_mode_or_not_at_all(tmp_path: Path, monkeypatch):
    path = tmp_path / "results.json"
    path.write_text("old\n")
    path.chmod(0o600)
    umask = os.umask(0o022)
    try:
        write_text_atomically(path, "new\n")
    finally:
        os.umask(umask)
    assert path.read_text() == "new\n" and path.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]

    def stopped(source, target):  # a run stopped during the write (Ctrl+C, a full disk)
        raise KeyboardInterrupt

    monkeypatch.setattr(out_path.os, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomically(path, "newer\n")
    assert path.read_text() == "new\n"  # the old file, whole; no temporary file left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_the_new_file_reaches_the_disk_before_its_rename_and_the_rename_after(tmp_path: Path, monkeypatch):
    # a power loss after the rename could leave an empty file under the new name (ext4, XFS): tester nit
    path = tmp_path / "probe.json"
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}"), os.path.getsize(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    monkeypatch.setattr(out_path.os, "fsync", fsync)
    monkeypatch.setattr(out_path.os, "replace", lambda a, b: (events.append(("replace",)), real_replace(a, b))[1])
    write_text_atomically(path, "whole\n")
    (kind, temporary, size), replaced, (kind2, folder, _) = events
    assert (kind, size, replaced, kind2) == ("fsync", 6, ("replace",), "fsync")
    assert Path(temporary).parent == tmp_path and Path(temporary).name.endswith(".tmp")
    assert folder == str(tmp_path) and path.read_text() == "whole\n"


@pytest.mark.parametrize("unwritable", ["probe.json"], indirect=True)
def test_fit_overwrite_of_a_probe_file_that_cannot_be_written_is_refused_before_any_work(unwritable: Path):
    from herald_service.training.fit import refuse_a_probe_there

    with pytest.raises(ValueError) as refused:
        refuse_a_probe_there(unwritable.parent, overwrite=True, served=False, given=True)
    assert str(refused.value).startswith(f"--out {unwritable} cannot be replaced (")


def test_overwrite_of_a_device_or_an_append_only_file_is_refused_and_a_link_s_target_is_replaced(tmp_path: Path):
    # tester findings: --overwrite accepted /dev/null (the write would have made it a regular file) and an
    # append-only file (chattr +a: the final replace failed with EPERM); a link was replaced by a file
    with pytest.raises(ValueError, match=r"^--out /dev/null is not a regular file \(a character device\); give the JSON"
                                         " file to write$"):
        refuse_an_existing_out(Path("/dev/null"), overwrite=True)
    target = tmp_path / "real.json"
    target.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    refuse_an_existing_out(link, overwrite=True)
    write_text_atomically(link, "new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    chattr = shutil.which("chattr")
    if os.geteuid() == 0 and chattr and subprocess.run([chattr, "+a", str(target)], capture_output=True).returncode == 0:
        try:
            with pytest.raises(ValueError, match="cannot be replaced"):
                refuse_an_existing_out(target, overwrite=True)
        finally:
            subprocess.run([chattr, "-a", str(target)], check=True)


def test_overwrite_of_a_read_only_file_is_refused_for_root_too(tmp_path: Path):
    # tester finding: as root, herald reference replaced a probe.json its owner had made read-only (chmod 444)
    path = tmp_path / "probe.json"
    path.write_text("{}\n")
    path.chmod(0o444)
    with pytest.raises(ValueError) as refused:
        out_path.check_replaceable(path, "--out")
    assert str(refused.value) == (f"--out {path} cannot be replaced (read-only: mode 0444); make it writable or choose"
                                  " another path")
    path.chmod(0o644)
    out_path.check_replaceable(path, "--out")  # writable again: accepted


def test_an_out_that_exists_and_is_neither_a_regular_file_nor_a_folder_is_refused_whatever_the_command(tmp_path: Path):
    # tester finding: herald plot --out /dev/null wrote /dev/null.png, --out /dev/stdout /dev/stdout.png; herald report
    # --out /dev/null wrote its Markdown into it and exited 0, and eval without --overwrite said "already exists"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "to-fifo.json"
    link.symlink_to(fifo)
    for path, kind in ((Path("/dev/null"), "a character device"), (fifo, "a pipe"), (link, "a pipe")):
        assert out_path.special_file_kind(path) == kind
        with pytest.raises(ValueError) as refused:
            out_path.check_out_path(path, "--out", "the Markdown file to write", folder=False)
        assert str(refused.value) == f"--out {path} is not a regular file ({kind}); give the Markdown file to write"
        with pytest.raises(ValueError) as refused:  # without --overwrite too: it is no file that exists to keep
            refuse_an_existing_out(path, overwrite=False)
        assert str(refused.value) == f"--out {path} is not a regular file ({kind}); give the JSON file to write"
    with pytest.raises(ValueError) as refused:  # a probe's --out: it said "is a file" (re-tester)
        out_path.check_out_path(fifo, "--out", "a folder", folder=True)
    assert str(refused.value) == f"--out {fifo} is not a folder (a pipe); give a folder"
    regular = tmp_path / "r.json"
    regular.write_text("{}")
    with pytest.raises(ValueError) as refused:
        out_path.check_out_path(regular, "--out", "a folder", folder=True)
    assert str(refused.value) == f"--out {regular} is a file; give a folder"
    for path in (regular, tmp_path, tmp_path / "new.json"):
        assert out_path.special_file_kind(path) is None
    out_path.check_out_path(regular, "--out", "the JSON file to write", folder=False)
    out_path.check_out_path(tmp_path / "new.json", "--out", "the JSON file to write", folder=False)


def test_an_out_that_is_a_link_to_nothing_is_refused_before_any_work(tmp_path: Path):
    # tester finding: herald fit --out <a dangling link> extracted and fitted, then failed with "[Errno 17] File
    # exists"; herald eval --out <a link to a missing file> ran the evaluation and failed on the link's missing folder,
    # or wrote through the link and created its target
    (tmp_path / "real").mkdir()
    for target in ("nowhere", "nodir/x.json", "real/missing.json"):
        link = tmp_path / f"link-{len(target)}"
        link.symlink_to(target)
        for folder, give in ((True, "a folder"), (False, "the JSON file to write")):
            with pytest.raises(ValueError) as refused:
                out_path.check_out_path(link, "--out", give, folder=folder)
            assert str(refused.value) == (f"--out {link} is a link to {target}, which does not exist; give {give}, or"
                                          " point the link at an existing one")
        with pytest.raises(ValueError):
            refuse_an_existing_out(link, overwrite=True)
        assert not (tmp_path / target).exists()
    kept = tmp_path / "link-to-folder"
    kept.symlink_to("real")  # a link to a folder that exists is a folder
    out_path.check_out_path(kept, "--out", "a folder", folder=True)
