"""What the hosts of a fleet share: fleet-wide leases (`leases`), this process's own slot
pools (`slots`) and which hosts are alive (`hosts`)."""
