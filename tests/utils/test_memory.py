"""``ocrr.utils.memory.available_bytes``: the machine's available memory, lowered to what the
memory limits of the process's control group and the groups above it leave, on cgroup v1
and v2, read from files laid out as the kernel lays them out."""

from __future__ import annotations

from pathlib import Path

import pytest

from ocrr.utils.memory import available_bytes

GIB = 1 << 30


def _proc(root: Path, available_kb: int, membership: str) -> Path:
    proc = root / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "meminfo").write_text(f"MemTotal:       25165824 kB\nMemFree:  1 kB\nMemAvailable:   {available_kb} kB\n")
    (proc / "self" / "cgroup").write_text(membership)
    return proc


def _group(folder: Path, limit: str, usage: int, stat: dict[str, int], v1: bool = False) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ("memory.limit_in_bytes" if v1 else "memory.max")).write_text(f"{limit}\n")
    (folder / ("memory.usage_in_bytes" if v1 else "memory.current")).write_text(f"{usage}\n")
    (folder / "memory.stat").write_text("".join(f"{k} {v}\n" for k, v in stat.items()))


def test_without_a_limit_it_is_the_machines_available_memory(tmp_path):
    proc = _proc(tmp_path, 8 * 1024 * 1024, "0::/user.slice/session.scope\n")
    cgroups = tmp_path / "cg"
    _group(cgroups / "user.slice" / "session.scope", "max", 5 * GIB, {"file": GIB, "shmem": 0})
    _group(cgroups / "user.slice", "max", 5 * GIB, {"file": GIB, "shmem": 0})
    assert available_bytes(proc, cgroups) == 8 * GIB


def test_a_v2_limit_leaves_its_limit_less_usage_its_page_cache_counted_free_but_not_its_shared_memory(tmp_path):
    proc = _proc(tmp_path, 20 * 1024 * 1024, "0::/docker/abc\n")
    cgroups = tmp_path / "cg"
    _group(cgroups / "docker" / "abc", str(4 * GIB), 3 * GIB, {"anon": GIB, "file": 2 * GIB, "shmem": GIB // 2})
    # 4 - 3 + (2 - 0.5) GiB: the cache but its shared memory is reclaimable
    assert available_bytes(proc, cgroups) == int(2.5 * GIB)


def test_a_parents_tighter_limit_wins(tmp_path):
    proc = _proc(tmp_path, 20 * 1024 * 1024, "0::/kubepods/pod1/ctr\n")
    cgroups = tmp_path / "cg"
    _group(cgroups / "kubepods" / "pod1" / "ctr", "max", GIB, {"file": 0, "shmem": 0})
    _group(cgroups / "kubepods" / "pod1", str(3 * GIB), 2 * GIB, {"file": 0, "shmem": 0})
    _group(cgroups / "kubepods", str(100 * GIB), 2 * GIB, {"file": 0, "shmem": 0})
    assert available_bytes(proc, cgroups) == GIB


def test_a_group_outside_the_namespace_reads_no_other_groups_limit(tmp_path):
    """A process whose group lies outside the cgroup namespace it sees is listed with ``..``
    (``0::/../other``): the mounted folder of that name, or the mount's root, is some other
    group, whose limit is not this process's."""
    proc = _proc(tmp_path, 8 * 1024 * 1024, "0::/../other\n")
    cgroups = tmp_path / "cg"
    _group(cgroups, str(2 * GIB), GIB, {"file": 0, "shmem": 0})
    _group(cgroups / "other", str(GIB), GIB, {"file": 0, "shmem": 0})
    assert available_bytes(proc, cgroups) == 8 * GIB


def test_a_v1_memory_hierarchy_and_its_no_limit_number(tmp_path):
    membership = "12:pids:/x\n4:memory:/process_api/abc\n3:cpu,cpuacct:/\n0::/\n"
    proc = _proc(tmp_path, 20 * 1024 * 1024, membership)
    cgroups = tmp_path / "cg"
    no_limit = "9223372036854771712"
    _group(cgroups / "memory" / "process_api" / "abc", str(6 * GIB), 5 * GIB, {"total_cache": 0}, v1=True)
    _group(cgroups / "memory" / "process_api", no_limit, 5 * GIB, {"total_cache": 0}, v1=True)
    _group(cgroups / "memory", no_limit, 5 * GIB, {"total_cache": 0}, v1=True)
    assert available_bytes(proc, cgroups) == GIB


def test_what_cannot_be_read_is_left_out_and_no_meminfo_says_nothing(tmp_path):
    proc = _proc(tmp_path, 2 * 1024 * 1024, "0::/missing\nnot a line\n")
    assert available_bytes(proc, tmp_path / "cg") == 2 * GIB
    (proc / "meminfo").unlink()
    (proc / "self" / "cgroup").unlink()
    assert available_bytes(proc, tmp_path / "cg") is None


def test_free_swap_is_added_to_what_is_left(tmp_path):
    proc = _proc(tmp_path, 2 * 1024 * 1024, "0::/box\n")
    with (proc / "meminfo").open("a") as f:
        f.write("SwapTotal:       4194304 kB\nSwapFree:        3145728 kB\n")
    _group(tmp_path / "cg" / "box", str(GIB), GIB // 2, {"file": 0, "shmem": 0})
    assert available_bytes(proc, tmp_path / "cg") == GIB // 2 + 3 * GIB


def test_this_machine_says_something_plausible():
    meminfo = Path("/proc/meminfo")
    if not meminfo.exists():
        pytest.skip("no /proc/meminfo: not Linux")
    got = available_bytes()
    lines = meminfo.read_text().splitlines()
    total = int(next(line for line in lines if line.startswith("MemTotal")).split()[1])
    swap = next((line for line in lines if line.startswith("SwapFree")), None)
    total += int(swap.split()[1]) if swap else 0
    assert got is not None and 0 <= got <= total * 1024
