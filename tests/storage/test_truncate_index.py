"""Index files cut at a commit-log offset (`IndexService.truncate_from`): the dropped keys are
gone from their buckets, the kept ones still chain, new keys chain after them, and the cut
survives a reload. Real files in tmp_path, tiny dimensions so buckets collide.
"""

from __future__ import annotations

from pathlib import Path

from storage import IndexFile, IndexService

BASE = 1_700_000_000_000


def everything(service: IndexService, key: str) -> list[int]:
    return service.query("T", key, 100, 0, 2**62)


def test_cut_inside_a_file_unchains_the_dropped_entries(tmp_path: Path) -> None:
    service = IndexService(tmp_path / "index", 4, 64, lambda: BASE)
    # Keys k0..k5 over 4 buckets (so chains mix keys), one record per 100 bytes.
    for i in range(30):
        service.build("T", [f"k{i % 6}"], 100 * i, BASE + i * 1000)
    index = service.files[-1]
    assert index.index_count == 31
    changed = service.truncate_from(1750)  # keeps records 0..17
    assert changed == [index]
    assert index.index_count == 19
    assert (index.end_phy_offset, index.end_timestamp) == (1700, BASE + 17_000)
    for k in range(6):
        assert everything(service, f"k{k}") == [100 * i for i in range(17, -1, -1) if i % 6 == k]
    # New keys chain after the kept ones (the dropped entries' numbers are reused).
    service.build("T", ["k0", "new"], 1750, BASE + 40_000)
    assert everything(service, "k0") == [1750, 1200, 600, 0]
    assert everything(service, "new") == [1750]
    service.flush()
    service.close()
    again = IndexService(tmp_path / "index", 4, 64, lambda: BASE)
    again.load()
    assert everything(again, "k5") == [1700, 1100, 500]
    assert everything(again, "k0") == [1750, 1200, 600, 0]
    assert again.files[-1].index_count == 21
    again.close()


def test_cut_drops_newer_files_whole(tmp_path: Path) -> None:
    now = [BASE]
    service = IndexService(tmp_path / "index", 8, 4, lambda: now[0])
    for i in range(10):  # 3 keys per file: 4 files
        now[0] += 1
        service.build("T", ["k"], 1000 + i, now[0])
    assert len(service.files) == 4
    service.truncate_from(1004)
    assert len(service.files) == 2
    assert everything(service, "k") == [1003, 1002, 1001, 1000]
    assert sorted(p.name for p in (tmp_path / "index").iterdir()) == sorted(
        f.path.name for f in service.files
    )
    # Nothing at or past the offset: nothing changes.
    assert service.truncate_from(5000) == []
    assert everything(service, "k") == [1003, 1002, 1001, 1000]
    service.close()


def test_cut_below_the_first_entry_leaves_an_empty_file(tmp_path: Path) -> None:
    index = IndexFile(tmp_path / "20240101000000000", 4, 16)
    for i in range(5):
        index.put_key("T#k", 100 + i, BASE)
    assert index.truncate_from(100) == 5
    assert index.index_count == 1
    assert index.select_phy_offsets("T#k", 10, 0, 2**62) == []
    assert index.put_key("T#k", 100, BASE + 5)
    assert index.select_phy_offsets("T#k", 10, 0, 2**62) == [100]
    index.close()
