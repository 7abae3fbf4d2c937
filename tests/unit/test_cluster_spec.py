"""`kb services start --nodes N` (G-LOCAL): the cluster's shape and each node's configuration,
and the adapter given every node's URL (a client that fails over when a node goes away)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from knowledge_core.adapters.opensearch import OpenSearchBackend, node_urls

from kb_cli import cluster, supervisor


def _recorded(svc: Path, nodes: int = 3) -> cluster.ClusterSpec:
    spec = cluster.ClusterSpec("kb-cluster-test", nodes, tuple(range(9350, 9350 + nodes)))
    (svc / cluster.CLUSTER_FILE).write_text(json.dumps(spec.to_json()))
    return spec


def test_g_local_cluster_node_yml_seeds_every_node_by_loopback_transport_address() -> None:
    spec = cluster.ClusterSpec("kb-cluster-x", 3, (9350, 9351, 9352))
    yml = spec.node_yml("opensearch-2")
    assert "transport.port: 9351\n" in yml
    assert 'discovery.seed_hosts: ["127.0.0.1:9350", "127.0.0.1:9351", "127.0.0.1:9352"]' in yml
    assert 'cluster.initial_cluster_manager_nodes: ["127.0.0.1:9350",' in yml
    assert "discovery.type" not in yml and "network.host: 127.0.0.1\n" in yml
    assert "node.attr.kb_node: 2\n" in yml and "cluster.name: kb-cluster-x\n" in yml


def test_g_local_cluster_node_names_keep_node_one_as_the_single_node() -> None:
    spec = cluster.ClusterSpec("c", 3, (1, 2, 3))
    assert spec.node_names() == ["opensearch", "opensearch-2", "opensearch-3"]
    assert all(cluster.is_node(n) for n in spec.node_names())
    assert not cluster.is_node("dynamodb") and not cluster.is_node("opensearch-x")
    assert supervisor._marker("opensearch-3") == supervisor.RUNNER_MAIN


def test_g_local_nodes_default_keeps_the_single_node(tmp_path: Path) -> None:
    """`--nodes 1` (and no `--nodes`) on a fresh state dir: no cluster file, the single node as before."""
    assert cluster.resolve_spec(tmp_path, None, single_node_data=False) is None
    assert cluster.resolve_spec(tmp_path, 1, single_node_data=False) is None
    assert not (tmp_path / cluster.CLUSTER_FILE).exists()


def test_g_local_recorded_cluster_is_reused_and_a_different_count_refused(tmp_path: Path) -> None:
    spec = _recorded(tmp_path)
    assert cluster.resolve_spec(tmp_path, None, single_node_data=False) == spec
    assert cluster.resolve_spec(tmp_path, 3, single_node_data=False) == spec
    with pytest.raises(cluster.ClusterError, match="3-node cluster"):
        cluster.resolve_spec(tmp_path, 1, single_node_data=False)
    with pytest.raises(cluster.ClusterError, match="3-node cluster"):
        cluster.resolve_spec(tmp_path, 2, single_node_data=False)


def test_g_local_single_node_data_is_not_turned_into_a_cluster(tmp_path: Path) -> None:
    with pytest.raises(cluster.ClusterError, match="single-node"):
        cluster.resolve_spec(tmp_path, 3, single_node_data=True)
    with pytest.raises(cluster.ClusterError, match="between 1 and"):
        cluster.resolve_spec(tmp_path, 9, single_node_data=False)


def test_g_local_cluster_env_names_every_node(tmp_path: Path) -> None:
    nodes = {f"n{i}": {"url": f"http://127.0.0.1:920{i}"} for i in (2, 3, 4)}
    st = {"opensearch": {"url": "http://127.0.0.1:9202", "nodes": nodes}}
    env = supervisor._env(st)
    assert env["OPENSEARCH_URL"] == "http://127.0.0.1:9202"
    assert env["OPENSEARCH_NODE_URLS"] == "http://127.0.0.1:9202,http://127.0.0.1:9203,http://127.0.0.1:9204"
    assert supervisor._env({"opensearch": {"url": "http://127.0.0.1:9202"}}) == {
        "OPENSEARCH_URL": "http://127.0.0.1:9202"
    }


def test_r_fail_adapter_client_knows_every_node_of_a_comma_separated_url() -> None:
    """A request to a node that went away is retried on another (opensearch-py marks it dead)."""
    assert node_urls("http://127.0.0.1:9202/, http://127.0.0.1:9203") == [
        "http://127.0.0.1:9202",
        "http://127.0.0.1:9203",
    ]
    backend = OpenSearchBackend("http://127.0.0.1:9202,http://127.0.0.1:9203,http://127.0.0.1:9204")
    hosts = [c.host for c in backend.client.transport.connection_pool.connections]
    assert sorted(hosts) == ["http://127.0.0.1:9202", "http://127.0.0.1:9203", "http://127.0.0.1:9204"]
