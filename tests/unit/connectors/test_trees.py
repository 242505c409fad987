"""Export trees: a .zip read in place with caps (bombs, traversal, links, encryption), a folder
through the PathGuard."""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

import pytest

from services.connectors.contract import MemberRefused
from services.connectors.paths import PathGuard, PathRefused
from services.connectors.trees import FolderTree, TreeRefused, ZipTree, open_tree


def _zip(path: Path, members: dict[str, bytes], modes: dict[str, int] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if modes and name in modes:
                info.external_attr = modes[name] << 16
            archive.writestr(info, data)
    return path


def test_a_plain_zip_reads_whole_members_by_name(tmp_path):
    path = tmp_path / "export.zip"
    with zipfile.ZipFile(path, "w") as archive:  # writestr sets permission bits only: still files
        archive.writestr("users.json", b"[]")
        archive.writestr("general/2024-01-02.json", b'[{"ts": "1"}]')
    tree = open_tree(path, PathGuard([tmp_path]))
    assert tree.names() == ["general/2024-01-02.json", "users.json"]
    assert tree.read("general/2024-01-02.json") == b'[{"ts": "1"}]'
    assert tree.refused == []
    tree.close()


def test_traversal_links_and_duplicates_are_refused_by_name(tmp_path):
    path = _zip(tmp_path / "bad.zip", {"../../etc/passwd": b"x", "/abs.json": b"x", "a\\b.json": b"x",
                                       "C:evil.json": b"x", "link.json": b"/etc/passwd", "ok.json": b"{}"},
                modes={"link.json": stat.S_IFLNK | 0o777})
    tree = open_tree(path, PathGuard([tmp_path]))
    assert tree.names() == ["ok.json"]
    reasons = {r.path.split("!", 1)[1]: r.reason for r in tree.refused}
    assert "'..'" in reasons["../../etc/passwd"]
    assert "absolute" in reasons["/abs.json"] and "absolute" in reasons["C:evil.json"]
    assert "backslash" in reasons["a\\b.json"]
    assert "link" in reasons["link.json"]
    with pytest.raises(MemberRefused):
        tree.read("../../etc/passwd")
    tree.close()


def test_an_encrypted_member_is_refused(tmp_path):
    path = _zip(tmp_path / "enc.zip", {"secret.json": b"{}", "ok.json": b"{}"})
    data = bytearray(path.read_bytes())
    # Set the encryption flag of the first member in its local header and central directory entry.
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.find(signature)
        data[at + offset] |= 0x1
    path.write_bytes(bytes(data))
    tree = open_tree(path, PathGuard([tmp_path]))
    assert "secret.json" not in tree.names() and "ok.json" in tree.names()
    assert any("encrypted" in r.reason for r in tree.refused)


def test_a_zip_bomb_is_refused_by_ratio_and_by_cap(tmp_path):
    path = _zip(tmp_path / "bomb.zip", {"bomb.json": b"0" * (64 * 1024 * 1024), "ok.json": b"[]"})
    tree = open_tree(path, PathGuard([tmp_path]))
    with pytest.raises(MemberRefused, match="zip bomb"):
        tree.read("bomb.json")
    with pytest.raises(MemberRefused, match="bytes"):
        tree.read("bomb.json", limit=1024)
    assert tree.read("ok.json") == b"[]"  # the rest of the archive still reads


def test_the_archive_total_is_capped(tmp_path):
    import random

    noise = random.Random(7).randbytes(600_000)  # incompressible: no ratio alarm
    path = _zip(tmp_path / "big.zip", {"a.bin": noise, "b.bin": noise})
    with zipfile.ZipFile(path) as archive:
        tree = ZipTree(archive, str(path), max_total=1_000_000)
        assert len(tree.read("a.bin")) == 600_000
        with pytest.raises(MemberRefused, match="in all"):
            tree.read("b.bin")


def test_not_a_zip_is_one_refusal_and_a_link_out_is_refused(tmp_path):
    (tmp_path / "junk.zip").write_bytes(b"not a zip at all")
    with pytest.raises(TreeRefused, match="not a readable"):
        open_tree(tmp_path / "junk.zip", PathGuard([tmp_path]))
    outside = tmp_path.parent / f"outside-{os.getpid()}.json"
    outside.write_text("{}")
    export = tmp_path / "export"
    export.mkdir()
    (export / "users.json").write_text("[]")
    (export / "leak.json").symlink_to(outside)
    try:
        tree = open_tree(export, PathGuard([export]))
        assert isinstance(tree, FolderTree)
        assert tree.names() == ["users.json"]
        assert [Path(r.path).name for r in tree.refused] == ["leak.json"]
        with pytest.raises(PathRefused):
            open_tree(outside, PathGuard([export]))
    finally:
        outside.unlink()


def test_a_folder_member_over_the_cap_is_refused(tmp_path):
    (tmp_path / "day.json").write_bytes(b"x" * 5000)
    tree = FolderTree(tmp_path, PathGuard([tmp_path]))
    with pytest.raises(MemberRefused, match="over 4096"):
        tree.read("day.json", limit=4096)
