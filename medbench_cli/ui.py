"""``medbench ui``: the Dagster UI (with its daemon: schedules, the registry sensor), the MLflow UI and the
leaderboard's site (the pages every ``medbench run`` writes to <data>/reports/site, or ``--site DIR``), on 127.0.0.1.

No server has authentication, so all listen on loopback only (RELIABILITY.md), answer
only the Host headers of that address (127.0.0.1 or localhost, and the port), against DNS
rebinding, and act only on their own pages' writes, against cross-site request forgery
(medbench_cli/webserver.py); the site's server is read-only besides. Ctrl-C (or SIGTERM) stops them all; when one of them
exits, the others are stopped too. With a remote MLflow tracking server (MLFLOW_TRACKING_URI=http...), its URL is printed and no
MLflow UI is started. The site's links from a cell to its Dagster partition and MLflow run go to these servers.

Every port (Dagster, MLflow, the site) is tried before anything starts: one that another process listens on (or that
cannot be bound) stops the command with exit 2 and one line naming the port, who holds it, and the option that
changes it (a server that cannot bind its port would otherwise log the error and run on, while the
other process answers at the printed address).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from medbench_cli.common import describe
from runtime import settings

HOST = "127.0.0.1"  # loopback only: no authentication on either server
SITE_PORT = 3100


def site_dir() -> Path:
    """Where ``medbench run`` writes the leaderboard's site (assets/reports.py, beside the saved leaderboard)."""
    return settings.DATA / "reports" / "site"


def site_address(port: int = SITE_PORT) -> str:
    return f"http://{HOST}:{port}/"


def add_parser(sub) -> None:
    p = sub.add_parser("ui", help="serve the Dagster UI (and daemon), the MLflow UI and the leaderboard's site on 127.0.0.1", description=describe(__doc__))
    p.add_argument("--port", type=tcp_port, default=settings.UI_PORT, help="Dagster UI port (default: MEDBENCH_UI_PORT or 3000)")
    p.add_argument("--mlflow-port", type=tcp_port, default=5000, help="MLflow UI port (default: 5000)")
    p.add_argument("--site-port", type=tcp_port, default=SITE_PORT, help=f"the leaderboard site's port (default: {SITE_PORT})")
    p.add_argument("--site", type=Path, metavar="DIR", help="the site to serve (default: the one `medbench run` writes, <data>/reports/site)")
    p.set_defaults(handler=main)


def tcp_port(text: str) -> int:
    """A port number as an option takes it: a whole number from 1 to 65535 (argparse says the rest: exit 2)."""
    if text.strip().isdigit() and 1 <= int(text) <= 65535:
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port (a whole number from 1 to 65535)")


def port_problem(port: int) -> str:
    """Why a server could not listen on ``HOST:port`` ('' when it can): bound here and let go at once, with
    SO_REUSEADDR as both servers (uvicorn) set it, so a port a closed connection left in TIME_WAIT still passes."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
            s.listen(1)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {HOST} is already in use{listener(port)}"
            return f"cannot listen on {HOST}:{port}: {exc.strerror or exc}"
    return ""


def listener(port: int) -> str:
    """`` (by pid N: command)`` for the process listening on ``port``, when the system says ('' otherwise)."""
    import psutil

    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
                try:
                    cmd = " ".join(psutil.Process(conn.pid).cmdline())[:120]
                except psutil.Error:
                    cmd = ""
                return f" (by pid {conn.pid}{': ' + cmd if cmd else ''})"
    except (psutil.Error, OSError):  # not allowed to see other users' sockets
        pass
    return ""


def check_ports(port: int, mlflow_port: int | None, site_port: int | None = None) -> None:
    """Refuse (exit 2, one line) a port a server of ``medbench ui`` could not listen on, before anything starts."""
    from medbench_cli.failures import USAGE, Refusal

    wanted = [(port, "--port", "--port PORT (or MEDBENCH_UI_PORT)", "the Dagster UI")]
    if mlflow_port is not None:
        wanted.append((mlflow_port, "--mlflow-port", "--mlflow-port PORT", "the MLflow UI"))
    if site_port is not None:
        wanted.append((site_port, "--site-port", "--site-port PORT", "the leaderboard's site"))
    for i, (number, flag, _, _) in enumerate(wanted):
        for other, other_flag, _, _ in wanted[i + 1 :]:
            if number == other:
                raise Refusal(f"{flag} and {other_flag} are both {number}", kept="nothing was started", todo="give each server a port of its own", code=USAGE)
    for number, _, option, server in wanted:
        why = port_problem(number)
        if why:
            raise Refusal(f"{why}, so {server} cannot start there", kept="nothing was started", todo=f"choose a free port with {option}", code=USAGE)


def allowed_hosts(port: int) -> str:
    """The Host headers a server on ``port`` answers: its own address, by number or as localhost (no other name, no private IP)."""
    return f"{HOST}:{port},localhost:{port}"


def commands(port: int, mlflow_port: int, tracking_uri: str, site: Path | None = None, site_port: int = SITE_PORT) -> dict[str, list[str]]:
    """The server commands, by name: ``dagster dev`` (webserver and daemon), for a local store ``mlflow ui``, and with
    ``site`` the leaderboard's site, all through medbench_cli.webserver; each answers only :func:`allowed_hosts` and
    their pages' writes."""
    dagster = [sys.executable, "-m", "medbench_cli.webserver", "dev", "--allowed-hosts", allowed_hosts(port)]
    cmds = {"dagster": [*dagster, "-h", HOST, "-p", str(port), "-m", "orchestration.definitions"]}
    if not tracking_uri.startswith(("http://", "https://")):
        cmds["mlflow"] = [
            sys.executable,
            "-m",
            "medbench_cli.webserver",
            "mlflow",
            "--backend-store-uri",
            tracking_uri,
            "--host",
            HOST,
            "--port",
            str(mlflow_port),
            "--allowed-hosts",
            allowed_hosts(mlflow_port),
        ]
    if site is not None:
        mlflow_url = f"http://{HOST}:{mlflow_port}" if "mlflow" in cmds else tracking_uri
        cmds["site"] = [
            sys.executable, "-m", "medbench_cli.webserver", "site", "--allowed-hosts", allowed_hosts(site_port), "--dir", str(site),
            "--host", HOST, "--port", str(site_port), "--dagster", f"http://{HOST}:{port}",
            *(["--mlflow", mlflow_url] if mlflow_url.startswith(("http://", "https://")) else []),
        ]  # fmt: skip
    return cmds


def ready_site(given: Path | None) -> tuple[Path | None, str]:
    """The site folder to serve, and a line to print when there is none: ``given`` as it is; else the one ``medbench run``
    writes, built first from the saved leaderboard if the run that saved it wrote none (a leaderboard older than the site)."""
    if given is not None:
        return (given, "") if (given / "index.html").is_file() else (None, f"no site at {given} (no index.html); `medbench export --site DIR` writes one")
    folder = site_dir()
    if (folder / "index.html").is_file():
        return folder, ""
    if not (settings.DATA / "reports" / "leaderboard.json").is_file():
        return None, "no leaderboard yet, so no site: `medbench run` writes both"
    from medbench_cli.export import export_site

    export_site(settings.DATA, folder)
    return folder, ""


def _stop(procs: dict[str, subprocess.Popen], grace: float = 4.0) -> None:
    """SIGTERM to each server's process group; what is left of the groups after ``grace`` seconds gets SIGKILL.

    Every process of a server is in its group (dagster dev's webserver, daemon and code server;
    mlflow ui's uvicorn workers, job runner and huey consumers). Left alone, dagster dev waits up to
    60 s for its webserver and daemon; Ctrl-C frees both ports within seconds instead.
    """
    groups = [proc.pid for proc in procs.values()]
    for pgid in groups:
        _signal_group(pgid, signal.SIGTERM)
    # Leaders are reaped only at the end: a zombie leader keeps its group id from being reused.
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(pgid) for pgid in groups):
        time.sleep(0.1)
    for pgid in groups:
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
    for proc in procs.values():
        proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:  # the whole group has exited
        pass


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running (zombies waiting to be reaped do not count)."""
    import psutil

    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def main(args: argparse.Namespace) -> int:
    from medbench_cli.common import prepare_environment

    tracking_uri = settings.default_tracking_uri()
    check_ports(args.port, None if tracking_uri.startswith(("http://", "https://")) else args.mlflow_port, args.site_port)
    prepare_environment()
    if tracking_uri.startswith("sqlite:///"):
        from runtime.mlflow_store import MLflowResource

        MLflowResource(tracking_uri=tracking_uri).ensure_store()  # created once, the way the runs expect it
    procs: dict[str, subprocess.Popen] = {}
    stop_requested: list[int] = []

    def request_stop(signum, frame):
        stop_requested.append(signum)

    # Our own handlers whatever this process inherited (a background job starts with SIGINT
    # ignored): a signal only sets a flag, so it never lands between starting a server and
    # recording it, and the servers start with both signals at their defaults (exec resets handled
    # signals, not ignored ones; dagster dev copies an ignored SIGINT onto SIGTERM).
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    try:
        site, missing = ready_site(args.site.resolve() if args.site else None)
        for name, cmd in commands(args.port, args.mlflow_port, tracking_uri, site, args.site_port).items():
            if stop_requested:
                return 0
            # Own process groups: stopping one stops its children (dagster dev's webserver and daemon).
            procs[name] = subprocess.Popen(cmd, cwd=settings.ROOT, start_new_session=True)
        print(f"Dagster UI: http://{HOST}:{args.port}", flush=True)
        print(f"MLflow UI:  {f'http://{HOST}:{args.mlflow_port}' if 'mlflow' in procs else tracking_uri}", flush=True)
        print(f"Leaderboard: {site_address(args.site_port)} ({site})" if site else f"Leaderboard: {missing}", flush=True)
        print("Ctrl-C stops them all.", flush=True)
        while not stop_requested:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    print(f"{name} exited (code {proc.returncode}); stopping the other servers", file=sys.stderr)
                    return proc.returncode or 1
            time.sleep(0.2)
        return 0
    finally:
        _stop(procs)
