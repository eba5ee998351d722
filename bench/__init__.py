"""Benchmarks: run each as `python -m bench.<name>`. What the benches share is in
`bench/support/`; their figures in `bench/RESULTS.md` (the current ones) and `bench/results/`
(each round as recorded)."""
