"""One error tree for the whole daemon.

    DispatchError
    ├── ConfigError            bad settings or config file
    ├── InvalidJob             a job document that fails validation (exit 2 at the CLI)
    │   └── BadCall            a Lua script refused its keys or arguments (code -4): nothing
    │                          was written; a bug or bad input, never retried as a fault
    ├── ScriptError            a Lua script answered with an error code
    │   ├── LockLost           the claim's lock token no longer matches
    │   ├── NotFound           no such job
    │   └── Conflict           the job is not in a state the transition allows
    ├── RedisUnavailable       a Redis call failed: an error reply, a timeout, no connection
    │   └── RedisUnreachable   no connection at all (refused, reset, closed): Redis is away
    ├── InstanceTaken          another daemon holds this host name or state dir (exit 1)
    └── DockerError            the Docker engine said no (see dispatch.runners.docker.errors)

Foreign errors (redis-py, httpx, OSError) are translated where they enter, so callers above
the boundary catch these and nothing else.
"""

from __future__ import annotations


class DispatchError(Exception):
    """Base of every error dispatch raises on purpose."""


class ConfigError(DispatchError):
    pass


class InvalidJob(DispatchError):
    pass


class BadCall(InvalidJob):
    pass


class ScriptError(DispatchError):
    pass


class LockLost(ScriptError):
    pass


class NotFound(ScriptError):
    pass


class Conflict(ScriptError):
    pass


class RedisUnavailable(DispatchError):
    pass


class InstanceTaken(DispatchError):
    pass


class RedisUnreachable(RedisUnavailable):
    pass


class DockerError(DispatchError):
    pass
