"""A local HTTP API + Lambda Invoke API in front of the real handlers, as `sam local` would run them.

Routes come from template.yaml. Public routes go through the template's Lambda authorizer with a
payload 2.0 event; IAM routes (admin) and the Invoke API answer only on loopback, and only to a request that
carries the local operator credential in `X-Kb-Operator` (G-LOCAL: loopback is not an identity).

`kb serve` runs every function the way Lambda does (`WorkerHandlers`): each instance is a worker process
that loads the handler once and takes one event at a time; concurrency comes from more instances, never
from threads sharing one module's state (the Powertools resolver's current event, logger keys, metrics).
`Handlers` runs them in this process, one caller at a time per function (`kb invoke`, tests)."""

from __future__ import annotations

import base64
import contextlib
import hmac
import importlib.util
import io
import ipaddress
import json
import multiprocessing
import os
import secrets
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

from . import template as tpl

ACCOUNT = "123456789012"
REGION = "us-east-1"
INVOKE_PREFIX = "/2015-03-31/functions/"
MAX_BODY_BYTES = 10 * 1024 * 1024  # API Gateway's payload limit
READ_TIMEOUT_S = 30.0
# At kb serve's end an instance may take this long to finish its event and close its container (its
# search backend's own bound is shorter); then it is killed.
STOP_GRACE_S = 5.0
REQUEST_DEADLINE_S = 60.0  # request line, headers and body, all reads together (L4)
MAX_EVENT_DEPTH = 64  # nesting of an Invoke API payload: deeper is refused before it meets recursion (L2)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
OPERATOR_HEADER = "x-kb-operator"  # the local operator credential (kb_cli.http.OPERATOR_HEADER), lowered


@dataclass
class LambdaContext:
    function_name: str
    memory_limit_in_mb: int = 1024
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{self.function_name}"
        self.function_version = "$LATEST"
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + self.timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class FunctionError(Exception):
    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


class _Functions:
    """The template's functions, found by logical id (SearchFunction) or short name (search)."""

    def __init__(self) -> None:
        self.functions = tpl.functions()

    def resolve(self, name: str) -> tpl.Function:
        for fn in self.functions.values():
            if name in (fn.logical_id, fn.short_name):
                return fn
        raise KeyError(name)


class Handlers(_Functions):
    """Loads each function's handler module once, from its CodeUri, by file path, and runs one event at
    a time per function (as one Lambda instance would)."""

    def __init__(self) -> None:
        super().__init__()
        self._modules: dict[str, ModuleType] = {}
        self._lock = threading.Lock()
        self._busy: dict[str, threading.Lock] = {
            fn.logical_id: threading.Lock() for fn in self.functions.values()
        }

    def invoke(self, name: str, event: Any) -> Any:
        fn = self.resolve(name)
        module_name, _, attr = fn.handler.rpartition(".")
        with self._lock:
            module = self._modules.get(fn.logical_id)
            if module is None:
                path = fn.code_dir / (module_name.replace(".", "/") + ".py")
                spec = importlib.util.spec_from_file_location(f"kbfn_{fn.short_name}", path)
                assert spec and spec.loader
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                self._modules[fn.logical_id] = module
        with self._busy[fn.logical_id]:
            try:
                return getattr(module, attr)(event, LambdaContext(fn.logical_id))
            except Exception as exc:
                traceback.print_exc()
                raise FunctionError(type(exc).__name__, str(exc)) from exc


class _Handoff:
    """A waiting event's place in the queue: it receives an instance, or None (start a new one)."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.instance: _Instance | None = None

    def hand(self, instance: _Instance | None) -> None:
        self.instance = instance
        self.ready.set()


class _Instance:
    """One worker process of one function: the handler loaded once, one event at a time over a pipe."""

    def __init__(self, name: str, verbose: bool) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a process that has threads
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_process, args=(child, name, verbose), daemon=True)
        self.process.start()
        child.close()

    def call(self, event: Any, timeout_s: float) -> Any:
        try:
            self.conn.send(event)
            if not self.conn.poll(timeout_s):
                raise FunctionError("Timeout", "Task timed out")
            status, *payload = self.conn.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            raise FunctionError("Runtime.ExitError", "the function's process exited") from exc
        if status == "error":
            raise FunctionError(payload[0], payload[1])
        return payload[0]

    def stop(self, grace_s: float = 0.0) -> None:
        """Close its pipe and kill it if it has not exited within `grace_s` (an idle instance ends at once
        when the pipe closes, after closing its container)."""
        self.hang_up()
        self.process.join(timeout=grace_s)
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)

    def hang_up(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.close()


def _worker_main(conn: Connection, name: str, verbose: bool) -> None:
    """A worker's life: load the handler, then answer events until the pipe closes (kb serve ends), then
    close the process's container (unsaved dense graphs saved)."""
    from knowledge_core import bootstrap

    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: kb serve stops us
    try:
        _answer(conn, name, verbose)
    finally:
        bootstrap.close()


def _worker_process(conn: Connection, name: str, verbose: bool) -> None:
    """An instance process's entry: its life (`_worker_main`), then the process ends without the
    interpreter's teardown (with ONNX Runtime loaded, most of a second per instance at every kb serve
    stop): everything it held is closed by then."""
    _worker_main(conn, name, verbose)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _answer(conn: Connection, name: str, verbose: bool) -> None:
    if not verbose:  # handler logs and metrics (stdout) stay behind --verbose; tracebacks still show
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's stdout, for its lifetime
    handlers = Handlers()
    handlers.resolve(name)
    while True:
        try:
            event = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple = ("ok", handlers.invoke(name, event))
        except FunctionError as exc:
            reply = ("error", exc.error_type, str(exc))
        try:
            conn.send(reply)
        except (OSError, BrokenPipeError):
            return


def _die_with_parent() -> None:
    """End this worker when kb serve is gone, even killed by SIGKILL (no orphan holds the state): an idle
    worker sees its pipe close; a busy one is caught by this watch. (PR_SET_PDEATHSIG would not do: it
    fires when the *thread* that started the worker ends, and request threads end after each request.)"""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


class WorkerHandlers(_Functions):
    """Every function as a pool of worker processes: an idle instance takes the event, or a new one is
    started (a cold start) up to `max_instances`; past that, events wait their turn, first come first
    served (a fair queue keeps the tail latency of a busy function close to its median). `limits`: another
    maximum for some functions (by logical id: kb serve's embed function, whose instances hold the models)."""

    def __init__(
        self, max_instances: int = 2, verbose: bool = False, limits: dict[str, int] | None = None
    ) -> None:
        super().__init__()
        self._max = {fn.logical_id: max_instances for fn in self.functions.values()} | (limits or {})
        self._verbose = verbose
        names = [fn.logical_id for fn in self.functions.values()]
        self._idle: dict[str, list[_Instance]] = {n: [] for n in names}
        self._waiting: dict[str, deque[_Handoff]] = {n: deque() for n in names}
        self._count: dict[str, int] = dict.fromkeys(names, 0)
        self._all: list[_Instance] = []
        self._lock = threading.Lock()
        self._timeouts = {fn.logical_id: fn.timeout_s for fn in self.functions.values()}

    def _acquire(self, name: str) -> _Instance:
        with self._lock:
            if self._idle[name]:
                return self._idle[name].pop()
            handoff = None
            if self._count[name] < self._max[name]:
                self._count[name] += 1
            else:
                handoff = _Handoff()
                self._waiting[name].append(handoff)
        if handoff is not None:
            handoff.ready.wait()
            if handoff.instance is not None:
                return handoff.instance
            # A retired instance's place was handed over: start its successor.
        try:
            instance = _Instance(name, self._verbose)
        except BaseException:
            self._vacate(name)
            raise
        with self._lock:
            self._all.append(instance)
        return instance

    def _vacate(self, name: str) -> None:
        """An instance's place is free: the next waiter starts a new one, or the count drops."""
        with self._lock:
            if self._waiting[name]:
                self._waiting[name].popleft().hand(None)
            else:
                self._count[name] -= 1

    def _release(self, name: str, instance: _Instance, healthy: bool) -> None:
        if healthy:
            with self._lock:
                if self._waiting[name]:
                    self._waiting[name].popleft().hand(instance)
                else:
                    self._idle[name].append(instance)
            return
        with self._lock:
            self._all.remove(instance)
        instance.stop()
        self._vacate(name)

    def invoke(self, name: str, event: Any) -> Any:
        fn = self.resolve(name)
        instance = self._acquire(fn.logical_id)
        healthy = True
        try:
            return instance.call(event, self._timeouts[fn.logical_id])
        except FunctionError as exc:
            healthy = exc.error_type not in ("Timeout", "Runtime.ExitError")
            raise
        finally:
            self._release(fn.logical_id, instance, healthy)

    def close(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop every instance: all pipes closed at once, then each given what is left of `grace_s`."""
        with self._lock:
            instances, self._all = self._all, []
        for instance in instances:
            instance.hang_up()
        deadline = time.monotonic() + grace_s
        for instance in instances:
            instance.stop(max(0.0, deadline - time.monotonic()))


def is_loopback(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


class FunctionRunner(Protocol):
    def resolve(self, name: str) -> tpl.Function: ...

    def invoke(self, name: str, event: Any) -> Any: ...


class LocalGateway:
    """`operator`: the local operator credential the admin and Invoke APIs require (`kb serve` passes the
    one of its state; without one, a random one nobody holds: those doors stay closed)."""

    def __init__(self, handlers: FunctionRunner | None = None, operator: str | None = None) -> None:
        self.handlers = handlers or Handlers()
        self._operator = (operator or secrets.token_urlsafe(32)).encode("utf-8")
        template = tpl.load_template()
        self.routes = tpl.routes(template)
        self.authorizer = tpl.authorizer_function(template)

    # --- HTTP API ---------------------------------------------------------------------------------
    def http(
        self, method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes, source_ip: str
    ) -> tuple[int, dict[str, str], bytes]:
        path = unquote(raw_path)
        if raw_path == CONSOLE or raw_path.startswith(CONSOLE + "/"):
            if not is_loopback(source_ip):
                return _plain(403, {"message": "Forbidden"})
            return console_file(raw_path, method)
        for route in self.routes:
            params = route.match(method, raw_path)
            if params is None:
                continue
            params = {k: unquote(v) for k, v in params.items()}
            # As API Gateway names it: `ANY /mcp` for a route of any method.
            method_key = "ANY" if route.method == "*" else route.method
            route_key = "$default" if route.path == "$default" else f"{method_key} {route.path}"
            context = self._request_context(method, path, route_key, source_ip, headers)
            if route.iam:
                if not is_loopback(source_ip) or cross_site(headers):
                    return _plain(403, {"message": "Forbidden"})
                if (refused := self.operator_refusal(headers)) is not None:
                    return refused
            elif route.authorizer and self.authorizer:
                decision = self._authorize(route_key, raw_path, query, headers, params, context)
                if decision is None:
                    return _plain(403, {"message": "Forbidden"})
                context["authorizer"] = {"lambda": decision}
            event = {
                "version": "2.0",
                "routeKey": route_key,
                "rawPath": raw_path,
                "rawQueryString": query,
                "headers": headers,
                "queryStringParameters": dict(parse_qsl(query)) or None,
                "pathParameters": params,
                "requestContext": context,
                "stageVariables": None,
                "body": body.decode("utf-8") if _is_text(body) else base64.b64encode(body).decode("ascii"),
                "isBase64Encoded": not _is_text(body),
            }
            try:
                result = self.handlers.invoke(route.function, event)
            except FunctionError:
                return _function_failed()
            return _from_proxy_result(result)
        return _plain(404, {"message": "Not Found"})

    def _authorize(
        self,
        route_key: str,
        raw_path: str,
        query: str,
        headers: dict[str, str],
        params: dict[str, str],
        context: dict,
    ) -> dict | None:
        method, _, path = route_key.partition(" ")
        event = {
            "version": "2.0",
            "type": "REQUEST",
            "routeArn": f"arn:aws:execute-api:{REGION}:{ACCOUNT}:local/$default/{method}{path}",
            "identitySource": [headers["authorization"]] if "authorization" in headers else [],
            "routeKey": route_key,
            "rawPath": raw_path,
            "rawQueryString": query,
            "headers": headers,
            "requestContext": context,
            "pathParameters": params,
        }
        try:
            result = self.handlers.invoke(self.authorizer or "", event)
        except FunctionError:
            return None
        if not isinstance(result, dict) or result.get("isAuthorized") is not True:
            return None
        return result.get("context") or {}

    @staticmethod
    def _request_context(
        method: str, path: str, route_key: str, source_ip: str, headers: dict[str, str]
    ) -> dict:
        now = time.time()
        return {
            "accountId": ACCOUNT,
            "apiId": "local",
            "domainName": headers.get("host", "localhost"),
            "domainPrefix": "localhost",
            "requestId": str(uuid.uuid4()),
            "routeKey": route_key,
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": headers.get("user-agent", ""),
            },
        }

    def operator_refusal(self, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes] | None:
        """G-LOCAL: None when `headers` (lowered names) carry the operator credential; else the typed 401
        (compared in constant time; the value given is never echoed)."""
        given = headers.get(OPERATOR_HEADER, "").strip().encode("utf-8")
        if hmac.compare_digest(given, self._operator):
            return None
        from knowledge_core.domain.errors import Unauthorized

        error = Unauthorized(
            "operator credential missing or wrong: the admin and Invoke APIs of kb serve need the "
            "X-Kb-Operator header (the kb CLI sends it from --state; the console takes it from the URL "
            "kb serve prints)"
        )
        return _plain(error.status, error.body(), {"WWW-Authenticate": 'KbOperator realm="kb serve"'})

    # --- Lambda Invoke API ----------------------------------------------------------------------
    def invoke_api(
        self, name: str, body: bytes, headers: dict[str, str], source_ip: str
    ) -> tuple[int, dict[str, str], bytes]:
        """`POST /2015-03-31/functions/{name}/invocations`: the operator's door (loopback, same-site, with
        the operator credential), then the function."""
        if not is_loopback(source_ip) or cross_site(headers):
            return _plain(403, {"message": "Forbidden"})
        if (refused := self.operator_refusal(headers)) is not None:
            return refused
        return self.lambda_invoke(name, body)

    def lambda_invoke(self, name: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        try:
            self.handlers.resolve(name)
        except KeyError:
            return _plain(
                404,
                {"Type": "User", "Message": f"Function not found: {name}"},
                {"x-amzn-errortype": "ResourceNotFoundException"},
            )
        try:
            event = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            return _invalid_payload("payload is not JSON")
        if too_deep(event, MAX_EVENT_DEPTH):
            return _invalid_payload(f"payload nests deeper than {MAX_EVENT_DEPTH} levels")
        try:
            result = self.handlers.invoke(name, event)
        except FunctionError as exc:
            # The exception's text stays in kb serve's log: it may quote internals or input.
            return _plain(
                200,
                {
                    "errorMessage": "the function failed (details in kb serve's log)",
                    "errorType": exc.error_type,
                },
                {"X-Amz-Function-Error": "Unhandled"},
            )
        return (
            200,
            {"Content-Type": "application/json", "X-Amz-Executed-Version": "$LATEST"},
            json.dumps(result, ensure_ascii=False).encode("utf-8"),
        )


CONSOLE = "/console"
CONSOLE_DIR = Path(__file__).parent / "console"
_CONSOLE_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
_CONSOLE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'self'",
    "Referrer-Policy": "no-referrer",
}


def console_file(raw_path: str, method: str) -> tuple[int, dict[str, str], bytes]:
    """The console's static files (loopback only), from the package: `/console/` is its page."""
    if method not in ("GET", "HEAD"):
        return _plain(405, {"message": "Method Not Allowed"})
    if raw_path == CONSOLE:
        return 308, {"Location": CONSOLE + "/", **_CONSOLE_HEADERS}, b""
    name = raw_path[len(CONSOLE) + 1 :] or "index.html"
    path = CONSOLE_DIR / name
    if "/" in name or name.startswith(".") or path.suffix not in _CONSOLE_TYPES or not path.is_file():
        return _plain(404, {"message": "Not Found"})
    return 200, {"Content-Type": _CONSOLE_TYPES[path.suffix], **_CONSOLE_HEADERS}, path.read_bytes()


def _function_failed() -> tuple[int, dict[str, str], bytes]:
    """A function that crashed, timed out or whose process died: the service's typed 500 body, as its own
    handlers answer an unexpected error (what failed stays in kb serve's log)."""
    from knowledge_core.domain.errors import KnowledgeError

    error = KnowledgeError()
    return _plain(error.status, error.body())


def _invalid_payload(message: str) -> tuple[int, dict[str, str], bytes]:
    return _plain(
        400, {"Type": "User", "Message": message}, {"x-amzn-errortype": "InvalidRequestContentException"}
    )


def too_deep(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests more than `limit` arrays/objects: checked without recursion, so a payload
    the parser accepted cannot exhaust the stack later (pickling it for a worker, or in the handler)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def addressed_here(hosts: list[str], port: int) -> bool:
    """G-LOCAL (H1): the request names this server, a loopback name with its own port. A page that rebinds
    its DNS name to 127.0.0.1 reaches the socket, but its browser still sends that name as `Host`."""
    if len(hosts) != 1:
        return False
    names = {f"{name}:{port}" for name in LOOPBACK_NAMES}
    if port == 80:  # RFC 9110 §7.2: a Host without a port names the scheme's default one
        names.update(LOOPBACK_NAMES)
    return hosts[0].strip().lower() in names


def _misdirected() -> tuple[int, dict[str, str], bytes]:
    """A request for another host (RFC 9110 §15.5.20: 421), refused before its body is read."""
    message = "host: this server answers only to 127.0.0.1, localhost or [::1] with its own port"
    return _plain(421, {"error": {"code": "misdirected_request", "message": message}})


def cross_site(headers: dict[str, str]) -> bool:
    """A browser request another site made (CSRF against the loopback admin and Invoke APIs): its
    `Sec-Fetch-Site` says so, or its `Origin` is not this server's own."""
    if headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        return True
    origin = headers.get("origin")
    return origin is not None and origin != f"http://{headers.get('host', '')}"


def _is_text(body: bytes) -> bool:
    try:
        body.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _plain(
    status: int, body: dict, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    """The gateway's own answers (as API Gateway's): JSON, never cached."""
    return (
        status,
        {"Content-Type": "application/json", "Cache-Control": "no-store", **(headers or {})},
        json.dumps(body).encode("utf-8"),
    )


def _from_proxy_result(result: Any) -> tuple[int, dict[str, str], bytes]:
    if not isinstance(result, dict) or "statusCode" not in result:
        return 200, {"Content-Type": "application/json"}, json.dumps(result).encode("utf-8")
    body = result.get("body") or ""
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else body.encode("utf-8")
    headers = {k: str(v) for k, v in (result.get("headers") or {}).items()}
    for k, values in (result.get("multiValueHeaders") or {}).items():
        headers[k] = ", ".join(str(v) for v in values)
    return int(result["statusCode"]), headers, raw


_log_lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    gateway: LocalGateway
    log_requests: bool
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S  # a client that stops sending is dropped, never holds a thread for good

    def setup(self) -> None:
        super().setup()
        # Headers and body go out as separate writes: without this, Nagle's algorithm holds the body back
        # until the client's delayed ACK (~40 ms) on a keep-alive connection.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = _DeadlineReader(self.connection)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.deadline = time.monotonic() + REQUEST_DEADLINE_S
        super().handle_one_request()

    def _serve(self) -> None:
        started = time.perf_counter()
        url = urlsplit(self.path)
        refused = self._refuse_framing()
        if refused is not None:
            self.close_connection = True  # the body was not read: the connection cannot be reused
            self._respond(*refused, started=started, path=url.path)
            return
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        client_ip = self.client_address[0]
        if (
            url.path.startswith(INVOKE_PREFIX)
            and url.path.endswith("/invocations")
            and self.command == "POST"
        ):
            lowered = {k.lower(): v for k, v in self.headers.items()}
            name = unquote(url.path[len(INVOKE_PREFIX) : -len("/invocations")])
            status, headers, raw = self.gateway.invoke_api(name, body, lowered, client_ip)
        else:
            lowered = {k.lower(): v for k, v in self.headers.items()}
            status, headers, raw = self.gateway.http(
                self.command, url.path, url.query, lowered, body, client_ip
            )
        self._respond(status, headers, raw, started=started, path=url.path)

    def _refuse_framing(self) -> tuple[int, dict[str, str], bytes] | None:
        """API Gateway's limits on the request itself: addressed to this server, a readable Content-Length
        (one value: RFC 9112 §6.3 makes differing ones a 400), at most 10 MB."""
        if not addressed_here(self.headers.get_all("host") or [], self.connection.getsockname()[1]):
            return _misdirected()
        if self.headers.get("transfer-encoding"):
            return _plain(411, {"message": "Length Required"})
        lengths = set(self.headers.get_all("content-length") or [])
        if len(lengths) > 1:
            return _plain(400, {"message": "Bad Request"})
        declared = next(iter(lengths), None)
        if declared is None:
            return None
        if not declared.isdigit():
            return _plain(400, {"message": "Bad Request"})
        if int(declared) > MAX_BODY_BYTES:
            return _plain(413, {"message": "Request Entity Too Large"})
        return None

    def _respond(
        self, status: int, headers: dict[str, str], raw: bytes, *, started: float, path: str
    ) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(raw)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)
        if self.log_requests:  # one line per request, as `sam local start-api` prints
            ms = (time.perf_counter() - started) * 1000
            with _log_lock:
                print(f"{self.command} {path} {status} {ms:.1f} ms", flush=True)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals as the gateway's JSON. A method it has no handler for (QUERY, BREW,
        …) is a request like any other: routed, so it meets the catch-all route or a 404, as on API
        Gateway; a malformed request line is refused."""
        if code == HTTPStatus.NOT_IMPLEMENTED and getattr(self, "path", None):
            self._serve()
            return
        self.close_connection = True
        status, headers, raw = _plain(code, {"message": HTTPStatus(code).phrase})
        with contextlib.suppress(OSError):
            self._respond(status, headers, raw, started=time.perf_counter(), path="-")

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _DeadlineReader(io.RawIOBase):
    """The request socket read against one deadline per request (L4): each read waits at most the read
    timeout and never past the deadline, so a client trickling a byte at a time is dropped as one that
    stops sending is (TimeoutError: http.server closes the connection without an answer)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.deadline = time.monotonic() + REQUEST_DEADLINE_S

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request deadline passed")
        self._sock.settimeout(min(READ_TIMEOUT_S, remaining))
        try:
            return self._sock.recv_into(buffer)
        finally:
            self._sock.settimeout(READ_TIMEOUT_S)  # writes keep the plain timeout


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # the listen backlog: bursts of connections wait instead of being reset

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (reset or closed mid-request: `curl -f` on an error status resets its
        keep-alive connection) is its own business, not a traceback in the terminal; anything else is."""
        if isinstance(sys.exc_info()[1], ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
            return
        super().handle_error(request, client_address)


def make_server(
    host: str, port: int, gateway: LocalGateway | None = None, *, log_requests: bool = False
) -> ThreadingHTTPServer:
    handler = type(
        "GatewayHandler", (_Handler,), {"gateway": gateway or LocalGateway(), "log_requests": log_requests}
    )
    return _Server((host, port), handler)
