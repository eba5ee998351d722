"""`dispatch worker` that claims ahead whatever its runs take: the soak's `--ahead`, and the
fault test of waiting claims (tests/faults/test_ahead_faults.py).

A host claims ahead only after `AHEAD_AFTER` runs in a row that each ended within
`FAST_RUN_S` (daemon/capacity.py), and the soak's process runs take 40-120 ms on this machine,
so its faults never met a claim waiting for a slot (daemon/ahead.py). Here every run counts as
fast and one is enough: the daemon holds five claims a slot from its first run's end, begins
them as runs end, and hands back those that waited `HOLD_S` in vain (`BENCH_AHEAD_HOLD_S`
seconds when set), over and over, while faults come. The bench and the tests only: nothing
else of the daemon changes.
"""

from __future__ import annotations

import os

from dispatch.cli import main
from dispatch.daemon import ahead, capacity

capacity.FAST_RUN_S = 3600.0
capacity.AHEAD_AFTER = 1
if "BENCH_AHEAD_HOLD_S" in os.environ:
    ahead.HOLD_S = float(os.environ["BENCH_AHEAD_HOLD_S"])

if __name__ == "__main__":
    main()
