"""What the benches share, one module per kind of helper.

redis.py     a redis-server of the bench's own on a free port, its version and clock,
             calls per command from INFO commandstats
children.py  the bench's child processes (redis-server, `dispatch worker` daemons), each
             killed when the bench exits, however it exits
cpu.py       CPU seconds of processes and of the whole machine, from /proc
stats.py     the percentile rule every bench reports by, and Jain's fairness
"""
