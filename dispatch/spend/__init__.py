"""Spend caps: runs, dollars and tokens per day, ISO week and month, per ledger.

A ledger is one scoped-limits row: `*`, a repo, a folder, `project:<id>` or `model:<name>`.
Every row that matches a job applies to it. Each cap of a row is a counter (a Redis HASH with
`used` and `held`, one per metric, ledger and window period), and every counter key shares one
hash tag, so a single script call checks and reserves all of a job's counters atomically, all
or nothing (`lua/budget_reserve.lua`). Amounts are integers: runs, micro-dollars, tokens.

    windows.py  the day, ISO week and month of an instant in the budget time zone
    plan.py     which counters a job touches, with its amounts, caps and soft bands
    ledger.py   reserve, settle, refund, and the settle of reservations lost with a daemon
    usage.py    the report a run writes to $DISPATCH_USAGE
    charge.py   what a run is charged once its ending is known
    report.py   each ledger's state, for `dispatch budget`

The spend gate (`dispatch/gates/spend.py`) reserves; the processor settles after the run.
"""
