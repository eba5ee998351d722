"""The usage report's way out of a container: the run's own directory (made by the processor,
`dispatch/spend/usage_report.py`) is bound at `USAGE_TARGET`, and `$DISPATCH_USAGE` names the
file in it. Apart from the rest of the create body, which says how the job itself is confined."""

from __future__ import annotations

from typing import Any

from dispatch.runners.base import USAGE_ENV, RunContext

USAGE_TARGET = "/run/dispatch-usage"


def with_usage(config: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """`config` with the run's usage directory bound and named; unchanged without one."""
    if ctx.usage_dir is None:
        return config
    mount = {"Type": "bind", "Source": str(ctx.usage_dir), "Target": USAGE_TARGET}
    host = config.setdefault("HostConfig", {})
    host["Mounts"] = [*host.get("Mounts", []), {**mount, "ReadOnly": False}]
    # last, so a job's own env cannot point the report elsewhere
    config["Env"] = [*config.get("Env", []), f"{USAGE_ENV}={USAGE_TARGET}/{ctx.usage_name}"]
    return config
