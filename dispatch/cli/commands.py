"""The operator's command line. Exit codes: 0 ok, 1 failure, 2 bad usage or invalid input,
always with a one-line reason on stderr."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from dispatch.cli import budget as spend
from dispatch.cli import drain, filters, inputs, service, waits
from dispatch.cli.inputs import UsageError
from dispatch.config.settings import Settings, from_env
from dispatch.errors import ConfigError, Conflict, DispatchError, InvalidJob, NotFound

if TYPE_CHECKING:
    from dispatch.client import Client
    from dispatch.model import Job

# Each command imports what it uses: redis-py's asyncio client alone takes longer to load than
# `submit` and `jobs` take in all (they go through cli/quick.py), and the parser needs none of it.

Command = Callable[[argparse.Namespace, Settings], int]


def main(argv: Sequence[str] | None = None) -> NoReturn:
    argv = sys.argv[1:] if argv is None else argv
    problem = inputs.argv_problem(argv)
    if problem:
        sys.exit(_fail(problem, 2))
    if argv[:1] == ["web"]:  # its options are the page's own (dispatch/web/serve.py)
        cmd_web(argv[1:])
    args = _parser().parse_args(argv)
    try:
        settings = from_env()
        code = args.func(args, settings)
    except (InvalidJob, ConfigError, UsageError) as exc:
        code = _fail(str(exc), 2)
    except DispatchError as exc:
        code = _redis_failed(exc, str(exc))
    except KeyboardInterrupt:
        code = 1
    except Exception as exc:
        if not _redis_error(exc):
            raise
        code = _redis_failed(exc, f"redis: {exc}")
    sys.exit(code)


def _redis_error(exc: Exception) -> bool:
    """redis-py's errors, and the OS's; redis-py is asked only if a command loaded it."""
    errors = sys.modules.get("redis.exceptions")
    return isinstance(exc, OSError) or (errors is not None and isinstance(exc, errors.RedisError))


def _redis_failed(exc: BaseException, said: str) -> int:
    """A cluster's redirection the client could not follow is said for what it is, never as a
    bare `16315 127.0.0.1:7003` (what redis-py makes of MOVED)."""
    if "redis" in sys.modules:  # only redis-py's errors are ever a redirection
        from dispatch.queue import topology

        if topology.redirected(exc):
            return _fail(topology.said(exc), 1)
    return _fail(said, 1)


def _fail(reason: str, code: int) -> int:
    print(f"dispatch: {reason.splitlines()[0] if reason else 'failed'}", file=sys.stderr)
    return code


def _with_client(fn: Callable[[Client], Awaitable[int]], settings: Settings) -> int:
    import asyncio

    from dispatch.client import Client

    async def go() -> int:
        async with Client.from_settings(settings) as client:
            return await fn(client)

    return asyncio.run(go())


# -- commands -------------------------------------------------------------------------------


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from dataclasses import replace

    from dispatch.daemon import assembly as daemon
    from dispatch.daemon.instance import hold_instance
    from dispatch.queue import embedded

    if args.allow:
        settings = replace(
            settings, allowed_roots=(*settings.allowed_roots, *inputs.roots(args.allow))
        )
    # held first: a second `up` must not start a redis-server on the first one's socket
    with hold_instance(settings) as holder:
        server = embedded.start(settings.state_dir) if settings.embedded else None
        try:
            daemon.run(settings, holder)
        finally:
            if server is not None:
                embedded.stop(server)
    return 0


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.daemon import assembly as daemon
    from dispatch.daemon.instance import hold_instance

    with hold_instance(settings) as holder:
        daemon.run(settings, holder)
    return 0


def cmd_submit(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import quick
    from dispatch.secrets.detect import warning

    job = _job_from_args(args, settings)
    inputs.check_local_folder(job, settings)
    waits.check_afters(job, int(time.time() * 1000), settings.wait_after_max_ms)
    due_ms, delay_ms = inputs.parse_after(args.after)
    window = inputs.duration("--dedup-window", args.dedup_window)
    try:
        done = quick.submit(settings, job, due_ms=due_ms, delay_ms=delay_ms, dedup_window_ms=window)
    except Conflict as exc:  # a taken id is the submitter's input, like any other
        raise UsageError(str(exc)) from None
    print(done.id)
    if said := warning(job.plain_env()):  # a hint once stored: a refusal stays one line
        print(f"dispatch: {said}", file=sys.stderr)
    return 0


def cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import quick
    from dispatch.cli import views as view

    wanted = filters.Filters.of(args, int(time.time() * 1000))  # checked before Redis is asked
    found, pause = quick.jobs(settings, args.state, args.limit, targets=bool(args.target))
    views = [v for v in waits.by_reason(found, args.reason) if wanted.keep(v)]
    views = filters.oldest_first(views)
    if args.json:  # each waiting job says `paused` there; the list keeps its shape
        print(view.jobs_json(views))
        return 0
    for line in view.pause_lines(pause):
        print(line)
    print(view.jobs_table(views))
    return 0


def cmd_why(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import story, triggers

    async def go(client: Client) -> int:
        if not args.json:
            print(await story.story(client, args.id))
            return 0
        found = await client.get(args.id)
        if found is None:
            raise NotFound(f"no job {args.id}")
        runs = await client.records_of(found)
        wait = await client.wait_state(found)
        print(waits.why_json(await triggers.why(client, found, runs, True), wait))
        return 0

    return _with_client(go, settings)


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import views as view

    async def go(client: Client) -> int:
        answer = await client.cancel(args.id, args.wait, kill=args.kill)
        line, code = view.cancel_line(args.id, answer)
        print(line, file=sys.stdout if code == 0 else sys.stderr)
        return code

    return _with_client(go, settings)


def cmd_pause(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import views as view

    async def go(client: Client) -> int:
        names = await (client.pause() if args.cmd == "pause" else client.resume())
        print(view.pause_line(args.cmd, names))
        return 0

    return _with_client(go, settings)


def cmd_triggers(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import triggers

    return _with_client(lambda client: triggers.show(client, settings, args.json), settings)


def cmd_trigger(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import triggers

    return _with_client(lambda client: triggers.act(client, settings, args), settings)


def cmd_drain(args: argparse.Namespace, settings: Settings) -> int:
    return _with_client(lambda c: drain.run(c, args.host, args.grace, args.wait), settings)


def cmd_service(args: argparse.Namespace, settings: Settings) -> int:
    return service.run(args, settings)


def cmd_web(args: argparse.Namespace | Sequence[str], settings: Settings | None = None) -> int:
    """The page is a process of its own (dispatch/web/, which reads the command line's views,
    not the other way round): this one becomes it, its arguments passed on whole."""
    rest = list(args) if isinstance(args, Sequence) else []
    os.execv(sys.executable, [sys.executable, "-m", "dispatch.web", *rest])


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """`status` and `hosts`: the fleet snapshot; exit 1 with one line when Redis cannot be read."""
    from dispatch.cli import fleet_extras, fleet_views
    from dispatch.fleet.view import snapshot

    async def go(client: Client) -> int:
        found = await snapshot(client.redis, client.prefix)
        if found.error:
            print(f"dispatch: {found.error}", file=sys.stderr)
            return 1
        more = None
        if args.cmd == "status":
            more = await fleet_extras.extras(client.redis, settings, found.at_ms)
        if args.json:
            print(fleet_views.as_json(found, args.cmd, more))
        elif more is not None:
            print(fleet_views.status_text(found, more))
        else:
            print(fleet_views.hosts_text(found))
        return 0

    return _with_client(go, settings)


def cmd_top(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import top  # Textual is loaded by this command alone

    return _with_client(top.run, settings)


def cmd_logs(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import logs

    if args.follow:
        return _with_client(lambda client: logs.follow(client, args.id, args.attempt), settings)
    return _with_client(lambda c: logs.show(c, settings, args.id, args.attempt), settings)


def cmd_capacity(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import capacity

    window_ms = inputs.duration("--since", args.since)

    async def go(client: Client) -> int:
        seconds, micros = await client.redis.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        since_ms = now_ms - window_ms
        hosts, projects = capacity.measure(await client.records_since(since_ms), since_ms, now_ms)
        if args.json:
            print(capacity.as_json(hosts, projects, since_ms, now_ms))
        else:
            print(capacity.text(hosts, projects, args.since))
        return 0

    return _with_client(go, settings)


def cmd_runs(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli import views as view

    async def go(client: Client) -> int:
        records = await client.run_rows(args.limit)
        print(view.runs_json(records) if args.json else view.runs_table(records))
        return 0

    return _with_client(go, settings)


def cmd_init(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.config.schemas import FILES
    from dispatch.config.watcher import scaffold

    try:
        written = scaffold(settings.config_dir)
    except OSError as exc:
        return _fail(f"cannot write {settings.config_dir}: {exc.strerror or exc}", 1)
    for name in FILES:
        path = settings.config_dir / name
        print(f"{'wrote' if path in written else 'kept'} {path}")
    return 0


def cmd_budget(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.clock import SystemClock

    print(spend.report(settings, args.json, SystemClock().now_ms()))
    return 0


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from dispatch.cli.doctor import report

    return report(settings)


# -- job from flags ------------------------------------------------------------------------


def _job_from_args(args: argparse.Namespace, settings: Settings) -> Job:
    import msgspec

    from dispatch.model import Job, Size, decode_job, new_id

    if args.json:
        raw = inputs.read_file(args.json)
        return decode_job(raw)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    env = inputs.env_pairs(args.env)
    fields: dict[str, Any] = {
        "id": args.id or new_id(),
        "command": command,
        "env": {**env, **inputs.secret_pairs(args.secret, env)},
        "attempts": args.attempts,
        "force": args.force,
        "egress": args.egress,
    }
    if args.folder:  # a folder lives on this machine: its jobs go to this host's own queue
        fields.update(
            kind="local", folder=os.path.abspath(args.folder), queue=f"jobs@{settings.host}"
        )
    elif args.repo:
        fields.update(kind="forge", repo=args.repo, number=args.number)
    if args.queue:
        fields["queue"] = args.queue
    optional = {
        "image": args.image,
        "dedup": args.dedup,
        "project": args.project,
        "model": args.model,
        "parentJobId": args.parent,
    }
    fields.update({k: v for k, v in optional.items() if v is not None})
    if args.timeout:
        fields["timeoutMs"] = inputs.duration("--timeout", args.timeout)  # documents use camelCase
    if args.memory is not None or args.cpus is not None:
        fields["size"] = Size(memory=inputs.memory(args.memory), cpus=args.cpus)
    if args.wait_for:
        fields["waitFor"] = waits.conditions(args.wait_for, int(time.time() * 1000))
    fields.update(spend.submit_fields(args))
    try:
        return msgspec.convert(fields, Job)
    except msgspec.ValidationError as exc:
        raise InvalidJob(str(exc)) from None


# -- parser --------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = inputs.OneLineParser(prog="dispatch", description="Run container jobs on a fleet.")
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    add = _adder(sub)
    up = add("up", cmd_up, "start the daemon (and its own redis-server when no URL is set)")
    up.add_argument(
        "--allow",
        action="append",
        metavar="DIR",
        help="a folder local jobs may use, with all below it (repeatable; adds to "
        "DISPATCH_ALLOWED_ROOTS)",
    )
    add("worker", cmd_worker, "start the daemon against DISPATCH_REDIS_URL")
    _submit_parser(add("submit", cmd_submit, "enqueue a job; prints its id"))
    jobs = add("jobs", cmd_jobs, "list jobs by state")
    jobs.add_argument(
        "--state", choices=["waiting", "delayed", "active", "completed", "failed", "cancelled"]
    )
    jobs.add_argument("--limit", type=inputs.count(1, inputs.MAX_LIMIT), default=200)
    waits.add_jobs_args(jobs)
    filters.add_args(jobs)
    jobs.add_argument("--json", action="store_true")
    why = add("why", cmd_why, "tell a job's story")
    why.add_argument("id")
    why.add_argument("--json", action="store_true")
    cancel = add("cancel", cmd_cancel, "stop one job, whatever its state")
    cancel.add_argument("id")
    cancel.add_argument(
        "--wait", type=inputs.seconds, default=10.0, help="DURATION to wait for the owning host"
    )
    cancel.add_argument(
        "--kill",
        action="store_true",
        help="kill a running job at once, or send the kill again to one whose stop did not take,"
        " and wait for the run to be gone",
    )
    add("pause", cmd_pause, "stop starting jobs fleet-wide (durable); jobs still enqueue")
    add("resume", cmd_pause, "start jobs again")
    listing = add("triggers", cmd_triggers, "cron triggers: schedule, next and last occurrence")
    listing.add_argument("--json", action="store_true")
    one = add("trigger", cmd_trigger, "run a trigger now, or pause or resume it fleet-wide")
    one.add_argument("action", choices=["run", "pause", "resume"])
    one.add_argument("id")
    status = add("status", cmd_status, "the fleet at a glance: hosts, queues, why jobs wait")
    status.add_argument("--json", action="store_true")
    hosts = add("hosts", cmd_status, "every host seen this week: live or gone, slots, version")
    hosts.add_argument("--json", action="store_true")
    add("top", cmd_top, "a live board of the fleet: hosts, waiting, running, endings")
    add("web", cmd_web, "serve the fleet's web page (dispatch web --help)")
    service.add_command(add, cmd_service)
    drain.add_command(add, cmd_drain)
    logs = add("logs", cmd_logs, "a job's captured output, from any host; -f follows it")
    logs.add_argument("id")
    logs.add_argument("--attempt", type=inputs.count(1, 100), help="N: that attempt's run")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="follow until the job ends; exit with its code"
    )
    cap = add("capacity", cmd_capacity, "how full each host has been, and each project's runs")
    cap.add_argument("--since", default="24h", help="DURATION of the window: 24h, 7d, 30d")
    cap.add_argument("--json", action="store_true")
    runs = add("runs", cmd_runs, "recent run records across the fleet")
    runs.add_argument("--limit", type=inputs.count(1, inputs.MAX_LIMIT), default=20)
    runs.add_argument("--json", action="store_true")
    spend.add_budget_command(add, cmd_budget)
    add("init", cmd_init, "write the config dir's missing files, empty and valid")
    add("doctor", cmd_doctor, "check Redis, scripts, Docker, images and config")
    return parser


def _adder(sub: Any) -> Callable[[str, Command, str], argparse.ArgumentParser]:
    def add(name: str, func: Command, help: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=help)
        p.set_defaults(func=func)
        return p

    return add


def _submit_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--queue")
    p.add_argument("--id")
    p.add_argument("--dedup", help="a duplicate within the window returns the first job's id")
    p.add_argument("--dedup-window", default="1h")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--folder", help="a local folder the job works in")
    target.add_argument("--repo", help="OWNER/NAME on the forge")
    p.add_argument("--number", type=inputs.count(1, 10**9), help="issue or pull request number")
    p.add_argument("--image")
    p.add_argument("--after", help="ISO-8601 instant or +DURATION")
    waits.add_submit_args(p)
    p.add_argument("--attempts", type=inputs.count(1, 100), default=3)
    p.add_argument("--timeout", help="DURATION, default 30m")
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument(
        "--secret",
        action="append",
        default=[],
        metavar="K=PROFILE/NAME",
        help="an env value resolved by a secrets.json profile on the host that runs the job",
    )
    p.add_argument("--project")
    p.add_argument("--model")
    p.add_argument("--parent", help="the job that chained this one (waits for its folder)")
    p.add_argument("--memory")
    p.add_argument("--cpus", type=inputs.cpus)
    p.add_argument(
        "--egress",
        action="append",
        default=[],
        metavar="HOST",
        help="only this host[:port] of the egress allow-list (repeat for more); never widens it",
    )
    p.add_argument("--force", action="store_true", help="run on a folder with uncommitted changes")
    spend.add_submit_flags(p)
    p.add_argument("--json", metavar="FILE", help="a job document (JSON), or - for stdin")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
