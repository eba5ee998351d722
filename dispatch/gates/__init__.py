"""The admission gates. A pickup passes them in this order (`pipeline.py`); the first that does
not admit decides. One line a gate, with the module that holds it:

    head.py             HeadGate            no config file was written by a newer release
    settled.py          SettledGate         an attempt already recorded ends as its record says
    trigger_overlap.py  TriggerOverlapGate  a trigger's occurrence skipped while one still runs
    project.py          ProjectGate         the job's project, from projects.json
    pause.py            PauseGate           pause windows of the fleet, a queue, a folder
    secret_profiles.py  SecretProfileGate   every secret reference names a known profile
    job_user.py         JobUserGate         the user a docker job runs as may touch its folder
    size.py             SizeGate            the job's size, refused if it can never fit here
    wait/               WaitGate            waitFor: a time, or a profile's check
    host_slot.py        HostSlotGate        this host's fixed concurrency
    scope.py            ScopeGate           one job per folder or repo, scoped limits fleet-wide
    overlay.py          OverlayGate         settings.json is readable and ours; it gives the model
    egress.py           EgressGate          the egress guard is up for a job on the job network
    endpoints.py        EndpointGate        model-endpoint slots, fleet-wide
    host_budget.py      HostBudgetGate      this host's memory and CPU budget (fleet/host_budget.py)
    dirty/              DirtyTreeGate       a local folder's git tree is clean (docs/dirty-tree.md)
    spend.py            SpendGate           spend caps: runs, dollars and tokens per window

What a gate answers and the holds it leaves are in `base.py`; `hold.py` takes a slot with its
fleet lease.
"""
