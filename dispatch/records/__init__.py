"""Run records: the append-only log on this host's disk (`disk_log`) and its mirror in Redis,
which any host can list (`mirror`)."""
