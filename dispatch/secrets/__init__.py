"""Secrets by reference: a job's env value may be `{"secret": "<profile>/<name>"}` (CLI
`--secret NAME=<profile>/<name>`) instead of a value. Only the reference is stored (Redis, run
records); the value exists on the host that runs the job, for as long as the run lasts.

    profiles   secrets.json in the config dir (dispatch.config.schemas.SecretProfile): each
               profile a command run on the host or a private file (resolver.py)
    gate       an unknown profile refuses the job `secret-profile-unknown` before anything is
               held or spent (dispatch.gates.secret_profiles)
    start      after the gates, before the runner makes the container, inside the job's
               timeout and abortable by cancel: resolved, hidden from the log, handed to the
               runner in `RunContext.secrets`, masked out of the result (around_run.py)
    mask       what dispatch writes while a value is known is scrubbed of it: log lines
               (dispatch.log.hide), the captured output (mask.py), the run's error text
    submit     `dispatch submit` warns when a plain env value looks like a credential
               (detect.py); doctor checks each profile (checks.py)

Modules here are imported by their path: this file imports nothing, so the output file can use
the mask without pulling in the resolver. `mask.py` imports nothing at all and is part of the
kernel (docs/architecture.md, Layers), which is why the runners' output file may import it.
"""
