"""`dispatch worker` that claims ahead whatever its runs take: the soak's `--ahead`.

A host claims ahead only while its runs end within `FAST_RUN_S` (daemon/capacity.py), and the
soak's process runs take 40-120 ms on this machine, so its faults never meet a claim waiting
for a slot (daemon/ahead.py). Here the bound is an hour: once a daemon has run
`AHEAD_AFTER` jobs it holds five claims a slot, begins them as runs end, and hands back
those that waited `HOLD_S` in vain, over and over, while the soak kills, freezes and pauses.
The bench only: nothing else of the daemon changes.
"""

from __future__ import annotations

from dispatch.cli import main
from dispatch.daemon import capacity

capacity.FAST_RUN_S = 3600.0

if __name__ == "__main__":
    main()
