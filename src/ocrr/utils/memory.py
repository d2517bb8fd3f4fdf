"""How much memory this process can still be given: the machine's, and its control group's.

A start that reads a large ledger into memory asks this first, so that a machine (or a
container) too small for it gets one clear error instead of the kernel's out-of-memory
killer, which may pick another process than the one that asked.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["available_bytes"]

# A group's limit, its usage, and the keys of memory.stat for its page cache and shared memory.
_V2_FILES = ("memory.max", "memory.current", "file", "shmem")
_V1_FILES = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_cache", "total_shmem")


def available_bytes(proc: Path = Path("/proc"), cgroups: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The memory this process can still be given without taking any in use: the kernel's
    ``MemAvailable``, lowered to what each memory limit of its control group and the groups
    above it leaves (the limit less the group's usage, its page cache counted as free, as the
    kernel reclaims it first, but for shared memory), plus the free swap (pages can go
    there: slow, but not a failure). None where the system does not say (not Linux)."""
    meminfo = _meminfo(proc / "meminfo")
    free = meminfo.get("MemAvailable")
    for left in _cgroup_room(proc / "self" / "cgroup", cgroups):
        free = left if free is None else min(free, left)
    return None if free is None else free + meminfo.get("SwapFree", 0)


def _meminfo(path: Path) -> dict[str, int]:
    """``/proc/meminfo``'s figures in bytes ({} if it cannot be read)."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    figures = {}
    for line in lines:
        key, _, value = line.partition(":")
        number, unit = (value.split() + ["", ""])[:2]
        if number.isdigit():
            figures[key] = int(number) * (1024 if unit == "kB" else 1)
    return figures


def _cgroup_room(membership: Path, cgroups: Path) -> list[int]:
    """What each memory limit on this process's control group and its parents leaves, for
    cgroup v2 (``0::/path``) and v1 (a ``memory`` hierarchy); [] where there is none."""
    try:
        lines = membership.read_text().splitlines()
    except OSError:
        return []
    room = []
    for line in lines:
        _, controllers, group = (line.split(":", 2) + ["", ""])[:3]
        if not group.startswith("/"):
            continue
        if controllers == "":  # v2: one unified hierarchy
            base, files = cgroups, _V2_FILES
        elif "memory" in controllers.split(","):
            base, files = cgroups / "memory", _V1_FILES
        else:
            continue
        parts = [p for p in group.split("/") if p and p != "."]
        if ".." in parts:
            # A group outside the cgroup namespace this process sees: the folders mounted here
            # are not its own or its parents', so none of their limits is read as its own.
            continue
        for depth in range(len(parts), -1, -1):
            left = _group_room(base.joinpath(*parts[:depth]), *files)
            if left is not None:
                room.append(left)
    return room


def _group_room(folder: Path, limit_file: str, usage_file: str, cache_key: str, shmem_key: str) -> int | None:
    """One group's limit less its usage, its page cache counted as free but for its shared
    memory, which has nowhere to go (None: no limit set, or its files cannot be read)."""
    try:
        limit_text = (folder / limit_file).read_text().strip()
        if limit_text == "max":
            return None
        limit = int(limit_text)
        if limit >= 1 << 60:  # v1's "no limit" is a huge number, not "max"
            return None
        usage = int((folder / usage_file).read_text().strip())
        stat = dict(line.split(" ", 1) for line in (folder / "memory.stat").read_text().splitlines() if " " in line)
        reclaimable = int(stat.get(cache_key, 0)) - int(stat.get(shmem_key, 0))
    except (OSError, ValueError):
        return None
    return max(0, limit - usage + max(0, reclaimable))
