"""Endpoint gate: whether the model server(s) behind the job's model have a free slot.

Every endpoint whose `models` list the job's effective model is taken, each once (by id) and in
id order, so two jobs never deadlock taking the same pair in opposite orders: an in-process
slot of `slots`, then a fleet lease of `slots` (`hold.take`). A per-machine endpoint (localhost,
127.0.0.0/8, ::1, 0.0.0.0, ::) is a different server on every host, so only the in-process slot
bounds it.
No model, or a model no endpoint serves, is admitted: there is nothing to bound. An endpoint
with `slots` <= 0 admits nothing (the job defers until the file says otherwise).
Which endpoints serve which model is worked out once per snapshot, not per pickup.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from dispatch.config.schemas import ConfigSnapshot, Endpoint
from dispatch.fleet.leases import FleetLeases
from dispatch.fleet.slots import Slots
from dispatch.gates.base import ADMIT, ENDPOINT_DELAY_MS, Decision, Defer, Pickup
from dispatch.gates.hold import Bound, lease_name, take
from dispatch.reasons import ENDPOINT

_LEASE_KIND = "endpoint"  # not a reason: what the fleet lease names


class EndpointGate:
    name = "endpoint"  # not a reason: the gate's own name

    def __init__(self, slots: Slots, leases: FleetLeases) -> None:
        self.slots = slots
        self.leases = leases
        self._serving: tuple[tuple[Endpoint, ...], dict[str, list[Endpoint]]] = ((), {})

    def inert(self, config: ConfigSnapshot) -> bool:
        return not config.endpoints

    async def check(self, pickup: Pickup) -> Decision:
        if pickup.model is None:
            return ADMIT
        for endpoint in self._by_model(pickup.config.endpoints).get(pickup.model, ()):
            busy = await take(pickup, self.slots, self.leases, _bound(endpoint))
            if busy is not None:
                return Defer(ENDPOINT_DELAY_MS, ENDPOINT, busy.holder, busy.detail)
        return ADMIT

    def _by_model(self, endpoints: tuple[Endpoint, ...]) -> dict[str, list[Endpoint]]:
        """`serving` of every model the snapshot's endpoints name (a new file is a new tuple)."""
        if self._serving[0] is not endpoints:
            models = {model for e in endpoints for model in e.models}
            self._serving = (endpoints, {m: serving(endpoints, m) for m in models})
        return self._serving[1]


def serving(endpoints: Iterable[Endpoint], model: str) -> list[Endpoint]:
    """The endpoints serving `model`, one per id (the first row wins), in id order."""
    by_id: dict[str, Endpoint] = {}
    for endpoint in endpoints:
        if model in endpoint.models:
            by_id.setdefault(endpoint.id, endpoint)
    return [by_id[key] for key in sorted(by_id)]


def per_machine(host: str) -> bool:
    """True for a loopback or unspecified host: each machine runs its own such server."""
    name = _hostname(host)
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _hostname(host: str) -> str:
    """The bare host name or address of "::1", "localhost:8080", "http://127.0.0.1:8000/v1"."""
    name = host.strip().lower()
    try:
        ipaddress.ip_address(name)
        return name  # a bare IPv6 address would not survive urlsplit
    except ValueError:
        pass
    try:
        return urlsplit(name if "://" in name else f"//{name}").hostname or ""
    except ValueError:
        return ""


def _bound(endpoint: Endpoint) -> Bound:
    lease = None if per_machine(endpoint.host) else lease_name(_LEASE_KIND, endpoint.id)
    return Bound(f"endpoint:{endpoint.id}", endpoint.slots, f"endpoint {endpoint.id}", lease)
