"""What touches the host: the commands the daemon starts there, the files it reads and writes.

`commands.py` starts every host command (`spawn`), signals its group (`kill_group`) and ends it
(`reap`), each under a named `Policy`. Every command gets no stdin and its stdout on a pipe;
none gets a shell. Who spawns what, what it inherits of the daemon's environment, whether it
leads a process group of its own (killed whole) and dies with the daemon (parent-death signal):

    policy    spawned by               inherits                   group  with daemon  stderr
    CHECK     gates/wait/profiles.py   PATH HOME LANG TZ (1)      own    no           pipe (4 KiB)
    GIT       gates/dirty/gate.py      PATH, + shadow.py pins (2) no (3) no           pipe
    RESOLVER  secrets/resolver.py      PATH HOME (4)              own    dies         discarded
    JOB       runners/process.py       PATH (5), + the job's env  own    dies         into stdout

    (1) each only when set and not empty; PATH defaults to /usr/local/bin:/usr/bin:/bin.
    (2) HOME and XDG_CONFIG_HOME empty private folders, LC_ALL=C, GIT_DIR and the other GIT_*
        pins of `gates/dirty/shadow.py` (no system or global config, no protocol, no lazy fetch).
    (3) killed alone (it starts nothing of its own), on a timeout or when its caller is cancelled.
    (4) PATH defaults to os.defpath, HOME to /.
    (5) "" when unset; a runner built with its own base env inherits that instead. Then the
        job's env, then $DISPATCH_USAGE; it runs in the job's folder for a local job.

Not yet here: the egress firewall's iptables (`egress/firewall.py`, the daemon's whole env, no
group of its own) and the embedded Redis (`queue/embedded.py`, subprocess.Popen in a session).

`files.py` reads with a bound (`read_bounded`: never blocking on a FIFO, only a regular file,
at most its limit; no last symlink followed unless the caller asks) and writes whole
(`write_atomic`). Which files may be symlinks:

    reader                   what               limit          a last symlink
    spend/usage_report.py    the usage report   64 KiB         refused: the job wrote it
    gates/dirty/layout.py    git's small files  1 MiB, 1 GiB   refused (6)
    gates/dirty/shadow.py    the index copied   1 GiB          refused (6), its own copy loop
    secrets/resolver.py      a file profile     1 MiB          followed (7)
    config/watcher.py        the config files   1 MiB          followed (8)
    cli/inputs.py            `submit FILE`      64 KiB         followed, a plain open (9)

    (6) the job wrote them; every path is resolved and checked inside the allowed roots first.
    (7) the operator names it in secrets.json; the descriptor must be a 0600 file of ours.
    (8) the operator's; `dispatch init` writes them with `write_atomic`.
    (9) the caller's own file: stdin, a pipe and a FIFO are read too, blocking as they do.

`text.py` turns a command's reply (bytes) into the line or lines a log or a record keeps.
This package imports nothing of dispatch but `model.py`.
"""
