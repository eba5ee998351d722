"""Cron triggers (triggers.json): schedules whose every occurrence becomes exactly one job.

    schedule.py   cron + IANA zone -> UTC instants, with the DST rule
    spec.py       a trigger checked and compiled; job ids, dedup keys, jitter, fingerprint
    store.py      what Redis keeps of triggers (pending occurrences, history, pause, counters)
    agreement.py  the fingerprint every daemon publishes; no minting while two differ
    minter.py     the daemon's round: mint ahead, withdraw, catch up, stall guard
    control.py    what `dispatch triggers` and `dispatch trigger run|pause|resume` do

The overlap policy is a gate (`dispatch/gates/trigger_overlap.py`). docs/operating/triggers.md
has the operator's view.
"""
