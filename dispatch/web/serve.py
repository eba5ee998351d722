"""`dispatch web [--listen HOST:PORT] [--tls-cert FILE --tls-key FILE]`: serve the page.

It listens on loopback by default. Beyond loopback it needs a token (DISPATCH_WEB_TOKEN or
DISPATCH_WEB_TOKEN_FILE): without one it refuses to start, in one line, exit 2, since anyone
who reaches the port would read every job's story. With a certificate it serves TLS, and the
session cookie is marked Secure.
"""

from __future__ import annotations

import argparse
import ipaddress
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from dispatch.cli.inputs import OneLineParser
from dispatch.config.settings import Settings, from_env
from dispatch.errors import ConfigError

DEFAULT_LISTEN = "127.0.0.1:8484"


class Refused(Exception):
    pass


def main(argv: Sequence[str] | None = None) -> NoReturn:
    args = _parser().parse_args(argv)
    try:
        settings = from_env()
        host, port = listen_address(args.listen)
        check(host, settings, args.tls_cert, args.tls_key)
    except (ConfigError, Refused) as exc:
        print(f"dispatch: {str(exc).splitlines()[0]}", file=sys.stderr)
        sys.exit(2)
    sys.exit(_serve(settings, host, port, args.tls_cert, args.tls_key))


def listen_address(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise Refused(f"--listen {text[:80]!r}: use HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host, int(port)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve beyond this machine
        return False


def check(host: str, settings: Settings, cert: str | None, key: str | None) -> None:
    if not loopback(host) and not settings.web_token:
        raise Refused(
            f"refusing to listen on {host} without DISPATCH_WEB_TOKEN (or _FILE): set one,"
            " or listen on 127.0.0.1"
        )
    if bool(cert) != bool(key):
        raise Refused("--tls-cert and --tls-key go together")


def _serve(settings: Settings, host: str, port: int, cert: str | None, key: str | None) -> int:
    import uvicorn

    from dispatch.web.app import build

    app = build(settings, tls=bool(cert))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        ssl_certfile=cert,
        ssl_keyfile=key,
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=2,  # open event streams never end by themselves
    )
    server = uvicorn.Server(config)
    scheme = "https" if cert else "http"
    mode = "sign in to act" if settings.web_token else "read-only: no token set"
    print(f"dispatch web: serving {scheme}://{host}:{port}/ ({mode})", flush=True)
    # uvicorn stops gracefully on SIGTERM or SIGINT, then raises the signal again to the
    # handler it found: this one, so a stop asked for is exit 0, like the daemon's
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, lambda *_: None)
    server.run()
    return 0 if server.started else 1


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="dispatch web", description="Serve the fleet's web page.")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT")
    p.add_argument("--tls-cert", metavar="FILE", help="serve TLS with this certificate")
    p.add_argument("--tls-key", metavar="FILE")
    return p
