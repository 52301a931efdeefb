"""``leasequeue dashboard``: turns the command line's options into a
DashboardConfig and serves it with uvicorn. Credentials come from the
environment or a file, never from the command line (``ps`` shows that)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import uvicorn

from ..app import MAX_LIST_COUNT, App
from ..errors import ConfigError
from .security import Guard, is_loopback
from .server import LOOPBACK_NAMES, DashboardConfig, create_app

TOKEN_ENV = "LEASEQUEUE_DASHBOARD_TOKEN"
BASIC_ENV = "LEASEQUEUE_DASHBOARD_BASIC_AUTH"  # user:password
MIN_TOKEN_CHARS = 16


def guard_from(args: argparse.Namespace) -> Guard:
    token = os.environ.get(TOKEN_ENV) or None
    if args.token_file:
        token = Path(args.token_file).read_text().strip() or None
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"the dashboard token must have at least {MIN_TOKEN_CHARS} characters")
    user = password = None
    basic = os.environ.get(BASIC_ENV)
    if basic:
        user, sep, password = basic.partition(":")
        if not sep or not user or not password:
            raise ConfigError(f"{BASIC_ENV} must be USER:PASSWORD")
    guard = Guard(token=token, basic_user=user, basic_password=password,
                  read_only=args.read_only, auth_reads=args.auth_reads)
    if not is_loopback(args.host):
        # reachable from elsewhere: everything asks who you are, or it does not start
        if not guard.has_credentials:
            raise ConfigError(f"--host {args.host} is not a loopback address: set {TOKEN_ENV} "
                              f"or {BASIC_ENV} first (every page then needs them)")
        guard.auth_reads = True
    return guard


def config_from(args: argparse.Namespace, app: App | None) -> DashboardConfig:
    if not 1 <= args.page_size <= MAX_LIST_COUNT:
        raise ConfigError(f"--page-size must be in 1..{MAX_LIST_COUNT}")
    return DashboardConfig(
        url=app.url if app is not None else args.url,
        prefix=app.prefix if app is not None else args.prefix,
        queues=tuple(args.queue or ()), limits=tuple(args.limit or ()),
        limiter_prefix=args.limiter_prefix, page_size=args.page_size, guard=guard_from(args),
        allowed_hosts=allowed_hosts(args))


def allowed_hosts(args: argparse.Namespace) -> tuple[str, ...]:
    """The Host names to answer to: --allowed-host, else the loopback names
    on a loopback bind, else any (every page needs credentials there)."""
    if args.allowed_host:
        return tuple(args.allowed_host)
    return LOOPBACK_NAMES if is_loopback(args.host) else ("*",)


async def serve(args: argparse.Namespace, app: App | None) -> int:
    config = config_from(args, app)
    server = uvicorn.Server(uvicorn.Config(
        create_app(config, app), host=args.host, port=args.port, log_level="warning",
        access_log=False, lifespan="on", server_header=False))
    mode = ("read-only" if not config.guard.writable else
            "actions need credentials")
    print(f"leasequeue dashboard on http://{args.host}:{args.port}/ (prefix {config.prefix}, "
          f"{mode}{', every page needs credentials' if config.guard.auth_reads else ''})",
          flush=True)
    await server.serve()
    return 0
