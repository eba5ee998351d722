"""The wait-for gate (`gate.py`, `WaitGate`): a job waits for a time or for a profile's check.

gate.py        orders the parts below for one pickup
policy.py      when to look again (pure)
conditions.py  what a job's waitFor asks, read once per pickup
claims.py      who holds a wait identity, fleet-wide
profiles.py    running a wait profile's check command on the host
refusals.py    the refusals a wait ends in
parts.py       what one pickup knows of its wait, and the gate's collaborators
state.py       the per-job wait state in Redis, read by `dispatch why`
"""
