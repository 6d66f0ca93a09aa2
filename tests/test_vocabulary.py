"""One spelling per idea (``models.core.vocabulary``): the load generator, the CLI, the what-if and
the charts share one ``Routing``; the older ``affinity`` is still read, as the same routing."""

from __future__ import annotations

import ast
import json

import pytest

from kvplan.collectors.loadgen.workload import Workload, request_schedule
from kvplan.models.cache import pools, sim
from kvplan.models.core.errors import KvplanError
from kvplan.models.core.vocabulary import ALIASES, Routing
from tests.test_layers import ROOT, files


def test_the_older_spelling_is_the_same_routing_everywhere():
    assert Routing.parse("affinity") is Routing.PREFIX_AFFINITY
    w_old, w_new = Workload(routing="affinity"), Workload(routing="prefix_affinity")
    assert w_old.routing is w_new.routing is Routing.PREFIX_AFFINITY
    assert request_schedule(w_old, 3) == request_schedule(w_new, 3)
    # a user's turns stay on one server (not round-robin's user+turn rotation)
    sched = request_schedule(w_new, 3)
    assert all(len({s for u2, _, s in sched if u2 == u}) == 1 for u in range(w_new.users))
    trace = sim.make_trace([([1, 2], 20, 10), ([1, 2, 3], 30, 10), ([1, 2], 20, 10)])
    assert list(pools.route(trace, 2, "affinity")) == list(pools.route(trace, 2, Routing.PREFIX_AFFINITY))


def test_a_member_is_its_string_in_json_and_rows():
    assert Routing.PREFIX_AFFINITY == "prefix_affinity" and f"{Routing.ROUND_ROBIN}" == "round_robin"
    assert json.loads(json.dumps({"routing": Workload(routing="affinity").routing})) == {"routing": "prefix_affinity"}


def test_an_unknown_routing_names_the_choices():
    with pytest.raises(KvplanError, match="round_robin, random, prefix_affinity, affinity; got 'sticky'"):
        Routing.parse("sticky")
    with pytest.raises(KvplanError, match="routing"):
        Workload(routing="sticky")


def stray_literals(folders: tuple[str, ...], stray, skip: tuple[str, ...] = ()) -> list[str]:
    """``file:line 'value'`` of every string constant outside the vocabulary for which
    ``stray(node, tree)`` holds, in the modules of ``folders`` (but those whose path starts with
    one of ``skip``)."""
    hits = []
    for folder in folders:
        for f in files(folder):
            if f.name == "vocabulary.py" or str(f.relative_to(ROOT)).startswith(skip):
                continue
            tree = ast.parse(f.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and stray(node, tree):
                    hits.append(f"{f.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    return hits


def test_no_module_spells_a_routing_beside_the_vocabulary():
    """The strings of ``Routing`` and its older spellings appear as literals only in the vocabulary
    (docstrings and help texts aside): every other module names the member."""
    spellings = {*ALIASES, "prefix_affinity"}
    assert stray_literals(("app", "collectors", "models", "deploy", "bench"),
                          lambda node, _: node.value in spellings) == []


def test_a_topology_is_its_string_in_json_and_rows():
    from kvplan.models.core.vocabulary import Topology

    assert [str(t) for t in Topology] == ["today", "shared", "private", "tiered"]
    assert json.loads(json.dumps({Topology.SHARED: 0.5, "t": Topology.TIERED})) == {"shared": 0.5, "t": "tiered"}


def test_no_module_spells_a_topology_beside_the_vocabulary():
    """``shared``, ``private`` and ``tiered`` appear as literals only in the vocabulary (docstrings
    aside) in app/, collectors/ and models/; ``today`` is also an English word in sentences
    (``app/report/fmt.py``, ``models/decision/reasons.py``), so it is checked as a call's first
    argument and a dict key, where a set-up is named. deploy/ and bench/ name A/B sides and folders
    ``shared``/``private``, not what-if set-ups."""
    spellings = {"shared", "private", "tiered"}

    def names_a_setup(node: ast.Constant, tree: ast.Module) -> bool:
        return any(node is n for d in ast.walk(tree) if isinstance(d, ast.Dict) for n in d.keys) or any(
            c.args and node is c.args[0] for c in ast.walk(tree) if isinstance(c, ast.Call))

    assert stray_literals(("app", "collectors", "models"), lambda node, tree: node.value in spellings or (
        node.value == "today" and names_a_setup(node, tree))) == []


def test_a_note_kind_tags_a_line_as_before():
    from kvplan.models.core.vocabulary import NoteKind

    assert NoteKind.NOTE.of(3) == "note: 3" and NoteKind.DOLLARS_LEFT_OUT.of("no price") == "dollars left out: no price"
    assert NoteKind.NOTE.tags("note: x") and not NoteKind.NOTE.tags("dollars left out: x")


def test_no_module_spells_a_note_kind_beside_the_vocabulary():
    """A note's tag (``note: ``, ``dollars left out: ``) is written and filtered on through
    ``NoteKind``: no string literal (an f-string's opening piece included) is a tag, and no
    ``startswith`` tests for one, outside the vocabulary."""
    from kvplan.models.core.vocabulary import NoteKind

    tags = {k.value for k in NoteKind} | {k.value.strip() for k in NoteKind}
    assert stray_literals(("app", "collectors", "models"), lambda node, _: node.value in tags) == []


def test_a_tier_is_its_string_in_json_and_rows():
    from kvplan.models.core.vocabulary import PricedTier, Tier

    assert [str(t) for t in Tier] == ["device", "lmcache"] and [str(t) for t in PricedTier] == ["all", "lmcache"]
    by_tier = {Tier.DEVICE: {"value": 1.0}, Tier.LMCACHE: None}
    assert json.dumps(by_tier) == '{"device": {"value": 1.0}, "lmcache": null}'
    assert json.loads(json.dumps({"priced_tier": PricedTier.LMCACHE})) == {"priced_tier": "lmcache"}
    assert {"device": 1}[Tier.DEVICE] == 1 and by_tier["lmcache"] is None  # a stored key reads either way



def test_a_priced_tier_given_as_a_string_is_the_member_and_a_wrong_one_names_the_choices():
    from kvplan.models.core.vocabulary import PricedTier
    from kvplan.models.prefill.measurement import PrefillMeasurement

    base = dict(window_seconds=60.0, requests=1.0, prompt_tokens=100.0, cached_prompt_tokens=50.0, num_gpus=1)
    assert PrefillMeasurement(**base, priced_tier="lmcache").priced_tier is PricedTier.LMCACHE
    assert PrefillMeasurement(**base).priced_tier is PricedTier.ALL
    with pytest.raises(ValueError, match="PrefillMeasurement.priced_tier: must be one of all, lmcache; got 'device'"):
        PrefillMeasurement(**base, priced_tier="device")

TRACE_FORMAT_MODULES = ("collectors/traces/", "collectors/demo.py")
"""Where ``lmcache`` names a trace format or a trace (``collectors.traces.parse.FORMATS``), not a
tier. deploy/ and bench/ also spell a server kind ``lmcache`` and SGLang's ``cache_source`` label
``device``: they are not checked."""


def test_no_module_spells_a_tier_beside_the_vocabulary():
    """``device`` and ``lmcache`` appear as literals only in the vocabulary (docstrings aside) in
    app/, collectors/, models/ and sql/, but for ``lmcache`` in the modules that read LMCache
    trace files, where it is a trace format (``TRACE_FORMAT_MODULES``)."""
    folders = ("app", "collectors", "models", "sql")
    assert stray_literals(folders, lambda node, _: node.value == "device") == []
    assert stray_literals(folders, lambda node, _: node.value == "lmcache", skip=TRACE_FORMAT_MODULES) == []


def priced_tier_constants(tree: ast.Module) -> set[int]:
    """``id`` of every constant where a priced tier is named: compared with an expression that
    reads ``priced_tier``, passed as ``priced_tier=``, or assigned (a field's default included)
    to a ``priced_tier``."""
    where: list[ast.AST] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Compare) and "priced_tier" in ast.unparse(n):
            where.append(n)
        elif isinstance(n, ast.keyword) and n.arg == "priced_tier":
            where.append(n.value)
        elif isinstance(n, ast.AnnAssign | ast.Assign) and n.value is not None and any(
                "priced_tier" in ast.unparse(t) for t in (n.targets if isinstance(n, ast.Assign) else [n.target])):
            where.append(n.value)
    return {id(c) for w in where for c in ast.walk(w) if isinstance(c, ast.Constant)}


def test_no_module_spells_a_priced_tier_beside_the_vocabulary():
    """``all`` and ``lmcache`` as a priced tier (compared with, passed as or assigned to a
    ``priced_tier``) are written ``PricedTier.ALL`` / ``PricedTier.LMCACHE``; ``all`` stays an
    English word everywhere else."""
    from kvplan.models.core.vocabulary import PricedTier

    seen: dict[int, tuple[ast.Module, set[int]]] = {}  # the tree is kept: its id is not reused

    def stray(node: ast.Constant, tree: ast.Module) -> bool:
        if node.value not in set(PricedTier):
            return False
        if id(tree) not in seen:
            seen[id(tree)] = (tree, priced_tier_constants(tree))
        return id(node) in seen[id(tree)][1]

    assert stray_literals(("app", "collectors", "models", "sql"), stray) == []
