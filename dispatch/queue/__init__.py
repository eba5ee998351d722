"""The queue in Redis: key names (`keys`), the Lua scripts and how they are called
(`scripts`), the job transitions built on them (`transitions`), and the Redis connection
(`connect`, and `embedded` for the local server the daemon starts when none is configured)."""
