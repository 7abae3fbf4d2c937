"""The local OpenSearch cluster of ``kb services start --nodes N``: its shape (a name, N nodes, one
transport port each), kept in ``<state>/services/opensearch-cluster.json``, and each node's
``opensearch.yml``.

Why separate JVMs: the runner can host several nodes in one JVM, but a fault run must kill *one* node
(SIGKILL) and see the others carry on, so every node is its own process with its own data dir and ports.
Discovery is by loopback seed hosts (every node's fixed transport port); the first start bootstraps the
cluster from those transport addresses (the runner names every single-node JVM "Node 1", so names cannot
tell the nodes apart — ``node.attr.kb_node`` does). The indices ask for ``auto_expand_replicas: 0-1``
(adapters/opensearch.py), so with two nodes or more every shard has one replica.

Stdlib only and the core's private_files, like the supervisor.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge_core.adapters.private_files import private_path

NODE_PREFIX = "opensearch"
CLUSTER_FILE = "opensearch-cluster.json"
# Away from the single node's default transport range start (9300…), so nodes of other state dirs that
# boot meanwhile rarely race for the same port.
TRANSPORT_PORTS = range(9350, 9400)
MAX_NODES = 5
HOST = "127.0.0.1"


class ClusterError(RuntimeError):
    """The requested cluster shape conflicts with the one this state dir already holds."""


def node_name(number: int) -> str:
    """The service name of node ``number`` (1-based): node 1 is the single node's ``opensearch``."""
    return NODE_PREFIX if number == 1 else f"{NODE_PREFIX}-{number}"


def is_node(name: str) -> bool:
    """Whether a service name is an OpenSearch node (the single node or a cluster node)."""
    return name == NODE_PREFIX or (
        name.startswith(NODE_PREFIX + "-") and name[len(NODE_PREFIX) + 1 :].isdigit()
    )


def base_dir_name(name: str) -> str:
    """The runner's base path under ``services/``: node 1 keeps the single node's ``opensearch/``."""
    return name


@dataclass(frozen=True)
class ClusterSpec:
    """A cluster's shape, fixed at its first start (its data dirs remember the cluster it formed)."""

    name: str
    nodes: int
    transport_ports: tuple[int, ...]

    def node_names(self) -> list[str]:
        return [node_name(i) for i in range(1, self.nodes + 1)]

    def transport_port(self, name: str) -> int:
        return self.transport_ports[self.node_names().index(name)]

    def node_yml(self, name: str) -> str:
        """The node's ``opensearch.yml`` (rewritten on every start, like the single node's)."""
        seeds = ", ".join(f'"{HOST}:{p}"' for p in self.transport_ports)
        number = self.node_names().index(name) + 1
        return (
            "# Written by kb_cli.cluster on every start of the node.\n"
            f"cluster.name: {self.name}\n"
            f"network.host: {HOST}\n"
            f"transport.port: {self.transport_port(name)}\n"
            f"discovery.seed_hosts: [{seeds}]\n"
            # only read until the cluster has formed once; transport addresses, since names repeat
            f"cluster.initial_cluster_manager_nodes: [{seeds}]\n"
            f"node.attr.kb_node: {number}\n"
            "cluster.routing.allocation.disk.threshold_enabled: false\n"
            "action.auto_create_index: true\n"
        )

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "nodes": self.nodes, "transport_ports": list(self.transport_ports)}


def read_spec(svc_dir: Path) -> ClusterSpec | None:
    """The cluster this state dir holds, or None (a single node, or nothing started yet)."""
    try:
        raw = json.loads((svc_dir / CLUSTER_FILE).read_text())
        return ClusterSpec(str(raw["name"]), int(raw["nodes"]), tuple(int(p) for p in raw["transport_ports"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def port_free(port: int) -> bool:
    """Nothing listens on loopback `port` and it can be bound (the supervisor's check for every service)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # like the servers themselves: connections in TIME_WAIT from a previous run do not count
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((HOST, port)) != 0


def resolve_spec(svc_dir: Path, nodes: int | None, single_node_data: bool) -> ClusterSpec | None:
    """The cluster to run: the one already recorded, or a new one of ``nodes`` nodes; None for the single
    node. ``nodes`` None means "as this state dir already is". A different count than the recorded one
    is refused (the data dirs belong to the cluster they formed), as is turning an existing single
    node's data into a cluster."""
    recorded = read_spec(svc_dir)
    if nodes is None or (recorded is None and nodes == 1):
        return recorded
    if nodes < 1 or nodes > MAX_NODES:
        raise ClusterError(f"--nodes must be between 1 and {MAX_NODES}")
    if recorded is not None:
        if recorded.nodes != nodes:
            raise ClusterError(
                f"this state dir holds a {recorded.nodes}-node cluster; stop it and use another --state "
                f"for {nodes} node(s)"
            )
        return recorded
    if single_node_data:
        raise ClusterError("this state dir holds a single-node OpenSearch; use another --state for a cluster")
    ports = [p for p in TRANSPORT_PORTS if port_free(p)][:nodes]
    if len(ports) < nodes:
        raise ClusterError(
            f"not enough free transport ports in {TRANSPORT_PORTS.start}..{TRANSPORT_PORTS.stop - 1}"
        )
    digest = hashlib.sha256(str(svc_dir.resolve()).encode()).hexdigest()[:8]
    spec = ClusterSpec(f"kb-cluster-{digest}", nodes, tuple(ports))
    private_path(svc_dir / CLUSTER_FILE).write_text(json.dumps(spec.to_json(), indent=2) + "\n")
    return spec


def health(url: str, nodes: int, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The cluster's health as seen from ``url`` once it is green with ``nodes`` nodes, else None."""
    query = f"wait_for_status=green&wait_for_nodes={nodes}&timeout={max(1, int(timeout_s))}s"
    try:
        with urllib.request.urlopen(f"{url}/_cluster/health?{query}", timeout=timeout_s + 2) as resp:
            answer = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 408: not green (yet) within the wait
        with contextlib.suppress(ValueError, OSError):
            exc.read()
        return None
    except (OSError, ValueError):
        return None
    if answer.get("status") == "green" and int(answer.get("number_of_nodes", 0)) >= nodes:
        return dict(answer)
    return None
