"""A local job's folder in its container: which folder may be bound, the bind asked for, and
the check of what was made.

The folder is the one the folder gate resolved at pickup (`dispatch.host.files.allowed_folder`:
a directory under an allowed root) and the folder mutex holds; that path, and only it, is bound
and checked, and the runner refuses `mount-mismatch` when the job's folder no longer resolves
to it just before the create. It goes in through the Engine API's
`Mounts` as a bind (not the `Binds` strings: a typed field, with no `:`-separated options to
split a path on, and a source that must exist, so the engine never creates a missing folder as
root on the host).

Once the container runs, `mismatch` compares the engine's own account of the mount (the
container's inspect) with the path that was checked: exactly one mount at the workspace, a
read-write bind of that path. A difference means the container holds something other than the
folder the gates and the runner checked, and the runner kills it at once (`mount-mismatch`).
What the engine reports is the source it was given: a path component swapped for a symlink
after the check would be followed by the kernel at mount time and still reported as given,
which is why the folder mutex covers a folder's ancestors and descendants (no other job of this
host can hold a folder above it).
"""

from __future__ import annotations

from typing import Any

from dispatch.runners.docker.client import Json


def bind_mount(source: str, target: str) -> Json:
    """The `Mounts` entry binding `source` (a resolved absolute path) at `target`, writable."""
    return {"Type": "bind", "Source": source, "Target": target, "ReadOnly": False}


def mismatch(info: Json, source: str, target: str) -> str:
    """What differs between the container's mounts at `target` (from its inspect) and a
    writable bind of `source`; "" when they agree."""
    mounts: list[dict[str, Any]] = info.get("Mounts") or []
    there = [m for m in mounts if m.get("Destination") == target]
    if len(there) != 1:
        return f"{len(there)} mounts at {target}"
    mount = there[0]
    if mount.get("Type") != "bind":
        return f"a {mount.get('Type')} mount at {target}, not a bind"
    if mount.get("Source") != source:
        return f"{target} is bound from {mount.get('Source')!r}, not the checked folder"
    if mount.get("RW") is not True:
        return f"{target} is not writable"
    return ""
