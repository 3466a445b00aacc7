"""Trust in the kernel cache: whose folder it is, and who else could write into it.

Below cpu.py: a library found in the cache is loaded into this
process and runs there, so, as ssh refuses a key file that others can write, the
cpu backend uses a cache folder only when no other user could have put a library
(and its .sha256) there. Any refusal is a CacheError, which the backend turns into
one warning and unfused replays.

    where = cache.private_folder(cache.folder())  # made 0700 where missing; CacheError if unsafe
"""
from __future__ import annotations

import os
import stat
from pathlib import Path


class CacheError(RuntimeError):
    """The kernel cache cannot be used: refused as unsafe, or its libraries do not load."""


def folder() -> Path:
    """Where compiled libraries live: $DEZERO_CACHE_DIR or ~/.cache/dezero/kernels,
    made absolute (dlopen looks for a bare "name.so" on the system's paths)."""
    return Path(os.environ.get("DEZERO_CACHE_DIR") or
                Path.home() / ".cache" / "dezero" / "kernels").absolute()


def private_folder(where: Path) -> Path:
    """`where`, made (mode 0700, as the folders above it that are missing) where it
    does not exist; CacheError when another user could write a library into it."""
    missing = []
    for path in (where, *where.parents):
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        path.mkdir(mode=0o700, exist_ok=True)
    reason = refusal(where)
    if reason is not None:
        raise CacheError(reason)
    return where


def refusal(where: Path) -> str | None:
    """Why a library in `where` could have been planted by another user, or None:
    the folder is not this user's own or others can write it, or a folder above it
    can be replaced by others (owned by another user than this one or root, or
    writable by others without the sticky bit that /tmp has). Group-writable
    counts as writable by others unless the group is the owner's private group."""
    if not hasattr(os, "getuid"):  # Windows: access is ACLs, not these modes
        return None
    me, fix = os.getuid(), "set DEZERO_CACHE_DIR to a folder of your own"
    for path in (where, *where.parents):
        info = path.stat()
        if info.st_uid not in (me, 0) or (path == where and info.st_uid != me):
            return (f"the kernel cache {where} is refused: {path} belongs to another user "
                    f"(uid {info.st_uid}), who could put a library there that would run "
                    f"in this process; {fix}")
        others = info.st_mode & (0o002 if _private_group(info) else 0o022)
        if others and (path == where or not info.st_mode & stat.S_ISVTX):
            return (f"the kernel cache {where} is refused: {path} can be written by other "
                    f"users (mode {stat.S_IMODE(info.st_mode):o}), who could put a library "
                    f"there that would run in this process; run `chmod go-w {path}` or {fix}")
    return None


def _private_group(info: os.stat_result) -> bool:
    """Whether the file's group is its owner's own (a user private group: the
    owner's primary group, with no other members), as Debian's ssh allows."""
    import grp  # noqa: PLC0415 - POSIX only
    import pwd  # noqa: PLC0415
    try:
        owner, group = pwd.getpwuid(info.st_uid), grp.getgrgid(info.st_gid)
    except KeyError:
        return False
    return owner.pw_gid == info.st_gid and set(group.gr_mem) <= {owner.pw_name}
