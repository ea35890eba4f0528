"""Choosing the peers of each node's part: the same everywhere, across domains, spread evenly."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierd.daemon.backends.peer.choose import PeerNode, choose_peers, ring_order


def _fleet(count: int, domains: int | None) -> list[PeerNode]:
    return [
        PeerNode(
            f"node-{i}", f"http://127.0.0.{i + 2}:8470", None if domains is None else f"rack{i % domains}"
        )
        for i in range(count)
    ]


def _assignment(key: str, nodes: list[PeerNode], replicas: int) -> dict[str, list[str]]:
    return {me.name: [p.name for p in choose_peers(key, me, nodes, replicas)] for me in nodes}


def test_four_nodes_in_two_racks_each_send_to_the_other_rack_and_each_receive_one() -> None:
    nodes = _fleet(4, 2)
    for step in range(50):
        chosen = _assignment(f"llama/{step}", nodes, 1)
        domain = {n.name: n.domain for n in nodes}
        assert all(domain[peers[0]] != domain[me] for me, peers in chosen.items()), chosen
        assert Counter(p for peers in chosen.values() for p in peers) == dict.fromkeys(domain, 1), chosen


def test_the_choice_is_the_same_whatever_order_the_nodes_are_listed_in() -> None:
    nodes = _fleet(6, 3)
    assert _assignment("run/7", nodes, 2) == _assignment("run/7", list(reversed(nodes)), 2)


def test_steps_get_different_rings() -> None:
    nodes = _fleet(8, None)
    rings = {tuple((me, tuple(p)) for me, p in _assignment(f"run/{s}", nodes, 1).items()) for s in range(20)}
    assert len(rings) > 1


def test_a_dead_peer_is_passed_over_for_the_next_and_no_one_sends_to_itself() -> None:
    nodes = _fleet(5, None)
    me = nodes[0]
    order = ring_order("run/3", me, nodes)
    assert me not in order
    assert sorted(n.name for n in order) == [n.name for n in nodes[1:]]
    alive = [n for n in nodes if n != order[0]]
    assert choose_peers("run/3", me, alive, 1) == [order[1]]


def test_one_domain_alone_still_gets_copies_on_other_nodes() -> None:
    nodes = [PeerNode(f"n{i}", "http://x:1", "rack") for i in range(3)]
    assert len(choose_peers("r/1", nodes[0], nodes, 2)) == 2
    assert choose_peers("r/1", nodes[0], nodes[:1], 1) == []


@settings(max_examples=60, deadline=None)
@given(
    count=st.integers(2, 24),
    domains=st.one_of(st.none(), st.integers(1, 6)),
    replicas=st.integers(1, 3),
    key=st.text(min_size=1, max_size=20),
)
def test_no_node_receives_more_than_its_share(
    count: int, domains: int | None, replicas: int, key: str
) -> None:
    """When every node writes a part, each receives ``replicas`` of them (fewer only in a small fleet).

    Whatever the domains: the interleaved ring hands each node's copies to the ones after it.
    """
    nodes = _fleet(count, domains)
    chosen = _assignment(key, nodes, replicas)
    received = Counter(p for peers in chosen.values() for p in peers)
    assert all(len(set(peers)) == len(peers) == min(replicas, count - 1) for peers in chosen.values())
    if domains is None or domains == 1 or count % domains == 0:
        assert set(received.values()) == {min(replicas, count - 1)}, chosen
    else:
        assert max(received.values()) <= min(replicas, count - 1) + replicas, chosen


@pytest.mark.parametrize("replicas", [1, 2])
def test_other_domains_come_first(replicas: int) -> None:
    nodes = _fleet(6, 3)
    for me in nodes:
        peers = choose_peers("r/9", me, nodes, replicas)
        assert all(p.domain != me.domain for p in peers)
