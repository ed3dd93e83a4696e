"""The two UIs of ``medbench ui`` answering only their own address and their own pages.

Neither server has authentication, and both listen on 127.0.0.1, which every web page the user opens
can reach through the browser. Two checks, as ASGI middleware around each server's app:

- :class:`HostCheck`, against DNS rebinding (a page whose own name resolves to 127.0.0.1): a request
  whose Host header is not the server's own address gets 403. dagster-webserver 1.13 has no such
  option; MLflow checks Host itself (``--allowed-hosts``), so only Dagster's app gets this one.
- :class:`CrossSiteCheck`, against cross-site request forgery (issue 29.1: a page's
  ``GET /graphql?query=mutation{launchRun...}`` launched a run): a GraphQL operation other than a
  query over GET, a write (POST, PUT, PATCH, DELETE) or a websocket from another origin (the Origin
  header, or Sec-Fetch-Site where a browser sent no Origin), and a GraphQL POST a browser could send
  without a CORS preflight (a body that is not JSON), are refused. A request with neither header does
  not come from a web page (every current browser sends Origin on writes and websockets): scripts and
  API clients keep working. MLflow's own middleware refuses foreign origins on its /api/ paths only and
  admits every localhost port, so its app gets this check too.

MLflow's app also gets :class:`ClassicViewFirst` (issue 29.7): a browser that never chose opens
medbench's experiments as runs with their metrics as columns, not as an empty GenAI overview.

    python -m medbench_cli.webserver dev --allowed-hosts 127.0.0.1:3000,localhost:3000 [dagster dev options]
    python -m medbench_cli.webserver serve --allowed-hosts HOSTS [--allowed-origins ORIGINS] [dagster-webserver options]
    python -m medbench_cli.webserver mlflow --allowed-hosts 127.0.0.1:5000,localhost:5000 [mlflow ui/server options]
    python -m medbench_cli.webserver site --allowed-hosts 127.0.0.1:3100,localhost:3100 --dir DIR --port 3100 [--dagster URL] [--mlflow URL]

``dev`` is ``dagster dev`` (the webserver, the daemon and their shared code server) with its
webserver started as ``serve``; ``serve`` is dagster-webserver's own command line with its app
wrapped; ``mlflow`` is ``mlflow ui`` whose uvicorn workers serve :data:`mlflow_app` (MLflow's app
wrapped; its origins are those of MLflow's own allowed hosts); ``site`` serves the leaderboard's static site
(medbench_core.site) read-only, behind the same two checks (:func:`site_app`). Each replaces one name that the
package's module looks up when it runs (``dagster._cli.dev.open_ipc_subprocess``,
``dagster_webserver.cli.create_app_from_workspace_process_context``, as in dagster 1.13;
``mlflow.server._build_uvicorn_command``, as in mlflow 3.17); tests/orchestration/test_servers.py
fails if an upgrade moves them (and test_ui_mlflow.py if MLflow's UI keeps its state elsewhere).
"""

from __future__ import annotations

import os
import sys


class HostCheck:
    """ASGI middleware: HTTP and websocket requests whose Host header is not one of ``allowed``
    (``host:port``, compared without case) get 403; lifespan events pass."""

    def __init__(self, app, allowed: list[str]) -> None:
        self.app = app
        self.allowed = {h.strip().lower() for h in allowed if h.strip()}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = _header(scope, b"host") or ""
            if host.lower() not in self.allowed:
                await _refuse(scope, send, 403, "Invalid Host header: this server answers only " + ", ".join(sorted(self.allowed)))
                return
        await self.app(scope, receive, send)


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})
CROSS_SITE = frozenset({"cross-site", "same-site"})  # Sec-Fetch-Site values of a request another page made
GRAPHQL_BODIES = frozenset({"application/json", "application/graphql"})  # neither is CORS-safelisted: a page needs a preflight


class CrossSiteCheck:
    """ASGI middleware refusing what another web page can make the user's browser send.

    - a GraphQL document over GET (or HEAD) on ``.../graphql`` that is anything but queries, or that
      does not parse: 405 (GraphQL over HTTP: mutations are never executed for a GET);
    - a write (any method but GET, HEAD, OPTIONS, TRACE) or a websocket handshake whose Origin is not
      one of ``origins`` (``http://host:port``; "null" included), or whose Sec-Fetch-Site says another
      site or another port of this one made it: 403;
    - a POST on ``.../graphql`` whose body is not JSON (or application/graphql): 415. Such a body
      needs no preflight, and Dagster then reads the operation from the URL.

    A request with neither Origin nor Sec-Fetch-Site is not a web page's: it passes. Lifespan passes.
    """

    def __init__(self, app, origins: list[str]) -> None:
        self.app = app
        self.origins = {o.strip().lower() for o in origins if o.strip()}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] in ("http", "websocket"):
            refusal = self.refusal(scope)
            if refusal:
                await _refuse(scope, send, *refusal)
                return
        await self.app(scope, receive, send)

    def refusal(self, scope) -> tuple[int, str] | None:
        """(status, reason) for a request to refuse, None for one to serve."""
        method = "WEBSOCKET" if scope["type"] == "websocket" else scope["method"]
        graphql = scope["path"].rstrip("/").endswith("/graphql")
        if method in ("GET", "HEAD"):
            if graphql and not _only_queries(scope.get("query_string") or b""):
                return 405, "GraphQL mutations (and anything but queries) are accepted only in a POST from this server's own pages"
            return None
        if method in SAFE_METHODS:
            return None
        origin, site = _header(scope, b"origin"), _header(scope, b"sec-fetch-site")
        if origin is not None and origin.strip().lower() not in self.origins:
            return 403, f"cross-origin request refused (Origin: {origin}); this server accepts writes only from " + ", ".join(sorted(self.origins))
        if site is not None and site.strip().lower() in CROSS_SITE:
            return 403, f"cross-site request refused (Sec-Fetch-Site: {site}); this server accepts writes only from its own pages"
        if graphql and method == "POST":
            media = (_header(scope, b"content-type") or "").split(";")[0].strip().lower()
            if media not in GRAPHQL_BODIES:
                return 415, f"a GraphQL POST must have a JSON body (Content-Type: application/json), not {media or 'none'}"
        return None


def _header(scope, name: bytes) -> str | None:
    """The first value of header ``name`` (lower case) in an ASGI scope, or None."""
    return next((v.decode("latin-1") for k, v in scope.get("headers") or [] if k == name), None)


def _only_queries(query_string: bytes) -> bool:
    """Whether every ``query`` parameter of a URL parses as GraphQL holding only query operations.

    Every value counts: frameworks differ on which of repeated parameters they read (Starlette the
    last, Flask the first). Whatever does not parse is refused too: nothing is lost, as the server
    could not have run it.
    """
    from urllib.parse import parse_qs

    documents = parse_qs(query_string.decode("latin-1"), keep_blank_values=True).get("query", [])
    if not documents:
        return True
    from graphql import GraphQLError, OperationDefinitionNode, OperationType, parse

    for text in documents:
        try:
            document = parse(text)
        except GraphQLError:
            return False
        if any(isinstance(d, OperationDefinitionNode) and d.operation != OperationType.QUERY for d in document.definitions):
            return False
    return True


async def _refuse(scope, send, status: int, reason: str) -> None:
    if scope["type"] == "websocket":  # closing before accepting refuses the handshake (403)
        await send({"type": "websocket.close", "code": 1008})
        return
    body = f"{reason}\n".encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    if status == 405:
        headers.append((b"allow", b"POST"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def origins(hosts: list[str], extra: list[str] = ()) -> list[str]:
    """The origins of pages served at ``hosts`` (``host:port``: plain http, as both servers serve), and the
    ``extra`` origins given as they are (``https://dagster.example.org`` behind a TLS proxy); no wildcard."""
    return [f"http://{h.strip()}" for h in hosts if h.strip() and "*" not in h] + [o.strip() for o in extra if o.strip() and "*" not in o]


def guarded(app, hosts: list[str], extra_origins: list[str] = ()):
    """``app`` answering only ``hosts`` and only its own pages' writes (Dagster's webserver)."""
    return HostCheck(CrossSiteCheck(app, origins(hosts, extra_origins)), hosts)


def _option(argv: list[str], name: str) -> tuple[str, list[str]]:
    """The value of option ``name`` (``--name V`` or ``--name=V``) and the other arguments."""
    rest, value = [], ""
    it = iter(argv)
    for a in it:
        if a == name:
            value = next(it, "")
        elif a.startswith(name + "="):
            value = a.split("=", 1)[1]
        else:
            rest.append(a)
    return value, rest


def _split(argv: list[str]) -> tuple[str, list[str]]:
    """The value of ``--allowed-hosts`` (required) and the other arguments."""
    hosts, rest = _option(argv, "--allowed-hosts")
    if not hosts:
        sys.exit("medbench_cli.webserver: --allowed-hosts HOST:PORT[,HOST:PORT...] is required")
    return hosts, rest


def serve(argv: list[str]) -> None:
    """dagster-webserver's command line, its app wrapped in :class:`HostCheck` and :class:`CrossSiteCheck`
    (``--allowed-origins O[,O...]``: origins beside those of the allowed hosts, e.g. a TLS proxy's)."""
    import dagster_webserver.cli as web

    hosts, rest = _split(argv)
    extra, rest = _option(rest, "--allowed-origins")
    create = web.create_app_from_workspace_process_context

    def create_checked(*args, **kwargs):
        return guarded(create(*args, **kwargs), hosts.split(","), extra.split(","))

    web.create_app_from_workspace_process_context = create_checked
    sys.argv = ["dagster-webserver", *rest]
    web.main()


def dev(argv: list[str]) -> None:
    """``dagster dev``, its webserver started by :func:`serve` with the same allowed hosts (and origins)."""
    # Private: `dagster dev` has no public hook for how it starts its webserver (dagster 1.13), and its
    # command line is dagster._cli's; the servers test fails if these names move.
    import dagster._cli.dev as dagster_dev
    from dagster._cli import main as dagster_main

    hosts, rest = _split(argv)
    extra, rest = _option(rest, "--allowed-origins")
    spawn = dagster_dev.open_ipc_subprocess

    def spawn_checked(parts, **kwargs):
        if list(parts[1:3]) == ["-m", "dagster_webserver"]:
            more = ["--allowed-origins", extra] if extra else []
            parts = [parts[0], "-m", "medbench_cli.webserver", "serve", "--allowed-hosts", hosts, *more, *parts[3:]]
        return spawn(parts, **kwargs)

    dagster_dev.open_ipc_subprocess = spawn_checked
    sys.argv = ["dagster", "dev", *rest]
    dagster_main()


class ClassicViewFirst:
    """ASGI middleware for MLflow's UI: in a browser that never chose, medbench's experiments open as
    runs with their metrics as columns (issue 29.7; why and how: :mod:`runtime.mlflow_ui`).

    The HTML page MLflow serves at ``/`` gets a script first in its head, run before MLflow's own,
    that sets what is not set yet in the browser's localStorage: the classic "machine_learning"
    workflow, the assistant's panel as already shown once, and for each experiment with medbench's
    saved view, that view as its page's state. A choice the user made (a workflow, columns of an
    experiment) is left alone.
    """

    def __init__(self, app, views=None) -> None:
        self.app = app
        self.views = views or medbench_views  # () -> {experiment id: view state JSON}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] not in ("/", "/index.html"):
            await self.app(scope, receive, send)
            return
        start: dict = {}
        chunks: list[bytes] = []

        async def hold(message) -> None:
            if message["type"] == "http.response.start":
                start.update(message)
                return
            if message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body, headers = b"".join(chunks), list(start.get("headers", []))
            kind = next((v for k, v in headers if k.lower() == b"content-type"), b"")
            plain = not any(k.lower() == b"content-encoding" for k, _ in headers)
            if start.get("status") == 200 and kind.startswith(b"text/html") and plain and b"<head>" in body:
                from starlette.concurrency import run_in_threadpool

                script = first_state_script(await run_in_threadpool(self.views))
                body = body.replace(b"<head>", b"<head>" + script, 1)
                headers = [(k, v) for k, v in headers if k.lower() != b"content-length"] + [(b"content-length", str(len(body)).encode())]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, hold)


def first_state_script(views: dict[str, str]) -> bytes:
    """The ``<script>`` of :class:`ClassicViewFirst`: localStorage entries set where absent."""
    import json

    from runtime.mlflow_ui import ASSISTANT_OPENED_KEY, WORKFLOW_KEY, persisted_state_key

    entries = {
        WORKFLOW_KEY: json.dumps("machine_learning"),
        ASSISTANT_OPENED_KEY: json.dumps(True),  # its button stays; the panel does not open over the runs by itself
        **{persisted_state_key(i): state for i, state in sorted(views.items())},
    }
    # JSON in a script element: "</" escaped, so that no value can end the element.
    data = json.dumps(entries).replace("</", "<\\/")
    return (
        "<script>/* medbench: what a browser that never chose sees first (runtime/mlflow_ui.py) */"
        f"try{{var s=window.localStorage,e={data};for(var k in e)if(s.getItem(k)===null)s.setItem(k,e[k])}}catch(x){{}}</script>"
    ).encode()


def medbench_views() -> dict[str, str]:
    """Experiment id -> the state of its medbench saved view, for every active experiment of this MLflow server's store that has one."""
    from runtime.mlflow_ui import VIEW_TAG, saved_state

    try:
        from mlflow.server.handlers import _get_tracking_store  # the server's own store (MLflow 3.17)

        experiments = _get_tracking_store().search_experiments(max_results=1000)
    except Exception:  # the page is served as MLflow serves it
        return {}
    views = {e.experiment_id: saved_state(e.tags[VIEW_TAG]) for e in experiments if VIEW_TAG in e.tags}
    return {i: v for i, v in views.items() if v}


MLFLOW_APP = "mlflow.server.fastapi_app:app"  # what `mlflow ui` has its uvicorn workers serve (mlflow 3.17)


def mlflow_ui(argv: list[str]) -> None:
    """``mlflow ui`` (``--allowed-hosts`` required), its uvicorn workers serving :data:`mlflow_app`."""
    import mlflow.server as mlflow_server
    from mlflow.cli import cli

    hosts, rest = _split(argv)
    build = mlflow_server._build_uvicorn_command

    def build_checked(uvicorn_opts, host, port, workers, app_name, *args, **kwargs):
        if app_name != MLFLOW_APP:  # never serve MLflow unguarded: an upgrade that renames it stops here
            raise SystemExit(f"medbench_cli.webserver: mlflow serves {app_name!r}, not {MLFLOW_APP!r}; update medbench_cli/webserver.py")
        return build(uvicorn_opts, host, port, workers, "medbench_cli.webserver:mlflow_app", *args, **kwargs)

    mlflow_server._build_uvicorn_command = build_checked
    # MLflow's job runner (huey consumers for GenAI scorers and prompt optimisation, 3.x) serves nothing
    # medbench logs, and costs each server a handful of processes: off unless the environment asks.
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    sys.argv = ["mlflow", "ui", "--allowed-hosts", hosts, *rest]
    cli.main(prog_name="mlflow")


def __getattr__(name: str):
    # ``mlflow_app``: built on first use, in each uvicorn worker, so that importing this module (the
    # Dagster modes) never imports MLflow's server. Its origins come from MLflow's own allowed hosts,
    # which `mlflow ui --allowed-hosts` puts in the workers' environment.
    if name == "mlflow_app":
        from mlflow.server.fastapi_app import app
        from mlflow.server.security_utils import get_allowed_hosts_from_env, get_allowed_origins_from_env

        # Beside its allowed hosts' own origins, those given to MLflow's --cors-allowed-origins (a proxy's, say).
        allowed = origins(get_allowed_hosts_from_env() or [], get_allowed_origins_from_env() or [])
        globals()["mlflow_app"] = checked = CrossSiteCheck(ClassicViewFirst(app), allowed)
        return checked
    raise AttributeError(name)


# The site's pages load only their own files: a browser holds them to it even if a page were changed.
SITE_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'none'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-cache"),  # a rebuilt site (every `medbench run`) is seen on the next load
]


class ReadOnly:
    """ASGI middleware: only GET and HEAD are served (405 otherwise); every response gets :data:`SITE_HEADERS`."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await _refuse(scope, send, 405, "the leaderboard site is read-only")
            return

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SITE_HEADERS]}
            await send(message)

        await self.app(scope, receive, with_headers)


def site_app(folder: str, hosts: list[str], ui: dict[str, str]):
    """The site in ``folder`` as an ASGI app: its files as they are (``/`` is index.html), ``/ui.js`` saying where the
    Dagster and MLflow UIs answer (``ui``), read-only, answering only ``hosts`` and its own pages (:func:`guarded`)."""
    import json

    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    script = f"// where the Dagster and MLflow UIs of this `medbench ui` answer\nwindow.MEDBENCH_UI = {json.dumps(ui)};\n"

    async def ui_script(request):
        return Response(script, media_type="text/javascript")

    app = Starlette(routes=[Route("/ui.js", ui_script), Mount("/", app=StaticFiles(directory=folder, html=True))])
    return guarded(ReadOnly(app), hosts)


def site(argv: list[str]) -> None:
    """Serve the leaderboard's site (:func:`site_app`) with uvicorn until stopped."""
    import uvicorn

    hosts, rest = _split(argv)
    folder, rest = _option(rest, "--dir")
    host, rest = _option(rest, "--host")
    port, rest = _option(rest, "--port")
    dagster, rest = _option(rest, "--dagster")
    mlflow, rest = _option(rest, "--mlflow")
    if not folder or not port or rest:
        sys.exit("usage: python -m medbench_cli.webserver site --allowed-hosts HOSTS --dir DIR --port PORT [--host H] [--dagster URL] [--mlflow URL]")
    app = site_app(folder, hosts.split(","), {k: v for k, v in (("dagster", dagster), ("mlflow", mlflow)) if v})
    uvicorn.run(app, host=host or "127.0.0.1", port=int(port), log_level="warning")


if __name__ == "__main__":
    mode, args = (sys.argv[1], sys.argv[2:]) if len(sys.argv) > 1 else ("", [])
    if mode not in ("dev", "serve", "mlflow", "site"):
        sys.exit("usage: python -m medbench_cli.webserver dev|serve|mlflow|site --allowed-hosts HOST:PORT[,...] [dagster, mlflow ui or site options]")
    {"dev": dev, "serve": serve, "mlflow": mlflow_ui, "site": site}[mode](args)
