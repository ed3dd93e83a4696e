"""The Dagster UI answering only the Host headers of the address it serves (``medbench ui`` runs it).

The webserver has no authentication, and dagster-webserver 1.13 has no option to check the Host
header: a DNS-rebinding page in the user's browser (a name of its own that resolves to 127.0.0.1)
could reach it and launch runs. MLflow checks Host itself (``--allowed-hosts``); here an ASGI
wrapper around dagster-webserver's app does the same, answering any other Host with 403.

    python -m medbench_cli.webserver dev --allowed-hosts 127.0.0.1:3000,localhost:3000 [dagster dev options]
    python -m medbench_cli.webserver serve --allowed-hosts HOSTS [dagster-webserver options]

``dev`` is ``dagster dev`` (the webserver, the daemon and their shared code server) with its
webserver started as ``serve``; ``serve`` is dagster-webserver's own command line with its app
wrapped. Each replaces one name that Dagster's module looks up when it runs
(``dagster._cli.dev.open_ipc_subprocess``, ``dagster_webserver.cli.create_app_from_workspace_process_context``,
as in dagster 1.13); tests/orchestration/test_servers.py fails if an upgrade moves them.
"""

from __future__ import annotations

import sys


class HostCheck:
    """ASGI middleware: HTTP and websocket requests whose Host header is not one of ``allowed``
    (``host:port``, compared without case) get 403; lifespan events pass."""

    def __init__(self, app, allowed: list[str]) -> None:
        self.app = app
        self.allowed = {h.strip().lower() for h in allowed if h.strip()}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next((v for k, v in scope.get("headers") or [] if k == b"host"), b"").decode("latin-1").lower()
            if host not in self.allowed:
                if scope["type"] == "websocket":  # closing before accepting refuses the handshake (403)
                    await send({"type": "websocket.close", "code": 1008})
                    return
                body = b"Invalid Host header: this server answers only " + ", ".join(sorted(self.allowed)).encode() + b"\n"
                headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
                await send({"type": "http.response.start", "status": 403, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def _split(argv: list[str]) -> tuple[str, list[str]]:
    """The value of ``--allowed-hosts`` and the other arguments."""
    rest, hosts = [], ""
    it = iter(argv)
    for a in it:
        if a == "--allowed-hosts":
            hosts = next(it, "")
        elif a.startswith("--allowed-hosts="):
            hosts = a.split("=", 1)[1]
        else:
            rest.append(a)
    if not hosts:
        sys.exit("medbench_cli.webserver: --allowed-hosts HOST:PORT[,HOST:PORT...] is required")
    return hosts, rest


def serve(argv: list[str]) -> None:
    """dagster-webserver's command line, its app wrapped in :class:`HostCheck`."""
    import dagster_webserver.cli as web

    hosts, rest = _split(argv)
    create = web.create_app_from_workspace_process_context

    def create_checked(*args, **kwargs):
        return HostCheck(create(*args, **kwargs), hosts.split(","))

    web.create_app_from_workspace_process_context = create_checked
    sys.argv = ["dagster-webserver", *rest]
    web.main()


def dev(argv: list[str]) -> None:
    """``dagster dev``, its webserver started by :func:`serve` with the same allowed hosts."""
    # Private: `dagster dev` has no public hook for how it starts its webserver (dagster 1.13), and its
    # command line is dagster._cli's; the servers test fails if these names move.
    import dagster._cli.dev as dagster_dev
    from dagster._cli import main as dagster_main

    hosts, rest = _split(argv)
    spawn = dagster_dev.open_ipc_subprocess

    def spawn_checked(parts, **kwargs):
        if list(parts[1:3]) == ["-m", "dagster_webserver"]:
            parts = [parts[0], "-m", "medbench_cli.webserver", "serve", "--allowed-hosts", hosts, *parts[3:]]
        return spawn(parts, **kwargs)

    dagster_dev.open_ipc_subprocess = spawn_checked
    sys.argv = ["dagster", "dev", *rest]
    dagster_main()


if __name__ == "__main__":
    mode, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if mode not in ("dev", "serve"):
        sys.exit("usage: python -m medbench_cli.webserver dev|serve --allowed-hosts HOST:PORT[,...] [dagster options]")
    {"dev": dev, "serve": serve}[mode](args)
