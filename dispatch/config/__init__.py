"""What the operator configures: env settings (`settings`), the shapes of the watched JSON
files (`schemas`), the size and duration grammar (`units`), the scoped-limit rows (`limits`),
the pause-window grammar (`windows`), and the loader that reads the files again when they
change (`watcher`).

All but `watcher` are part of the kernel (docs/architecture.md, Layers): they import nothing of
dispatch outside the kernel, so any module may use them. `watcher` sits above the middle row,
beside the gates, because it checks each file with its owner's grammar (egress rules, triggers).
"""
