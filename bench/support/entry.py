"""A bench's `main` around one measure: a redis-server of its own (or DISPATCH_REDIS_URL) and a
temporary dir for its length, then the figures printed (`--json`: one object)."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import uvloop

from bench.support.output import print_figures
from bench.support.redis import redis_server

Measure = Callable[[str, Path, argparse.Namespace], Coroutine[Any, Any, dict[str, Any]]]


def run_and_print(measure: Measure, args: argparse.Namespace, name: str) -> None:
    with redis_server() as url, tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        out = uvloop.run(measure(url, Path(tmp), args))
    print_figures(out, args.json)
