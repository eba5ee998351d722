"""Why the egress policy cannot be served on this host: the one error of this package."""

from __future__ import annotations

from dispatch.errors import DispatchError


class EgressDown(DispatchError):
    """The network, the firewall or the proxy is not as a job's protection needs it."""
