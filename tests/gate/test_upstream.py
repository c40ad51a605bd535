"""How the gate proxy tells an upstream's tools apart and what a delete named (no server)."""

from __future__ import annotations

import json

import mcp_types as types
import pytest

from efface.errors import InvalidInput
from efface.gate.upstream import (
    ToolRule,
    answer_values,
    found_in,
    hit_keys,
    load_mapping,
    probe_arguments,
    rule_for,
    target_key,
    targets,
)

DESTRUCTIVE = types.ToolAnnotations(destructive_hint=True)
READ_ONLY = types.ToolAnnotations(read_only_hint=True)


@pytest.mark.parametrize(
    "name, annotations, kind, why",
    [
        ("delete_entities", None, "delete", "name"),
        ("removeMemory", None, "delete", "name"),
        ("search_nodes", None, "read", "name"),
        ("read_graph", None, "read", "name"),
        ("create_entities", None, "write", "name"),
        ("tidy", DESTRUCTIVE, "delete", "annotations"),
        ("tidy", READ_ONLY, "read", "annotations"),
        ("search_and_delete", READ_ONLY, "read", "annotations"),  # an explicit hint outranks the name
        ("forget", types.ToolAnnotations(), "delete", "name"),  # hints left out say nothing
    ],
)
def test_kinds_from_annotations_then_names(name, annotations, kind, why):
    rule = rule_for(name, annotations)
    assert (rule.kind, rule.why) == (kind, why)


def test_the_mapping_outranks_everything(tmp_path):
    path = tmp_path / "map.json"
    path.write_text(
        json.dumps({"tools": {"search_nodes": {"kind": "other"}, "wipe": {"kind": "delete", "scope": "user"}}})
    )
    mapping = load_mapping(path)
    assert rule_for("search_nodes", READ_ONLY, mapping).kind == "other"
    assert rule_for("wipe", None, mapping) == ToolRule("delete", "mapping", scope="user")


@pytest.mark.parametrize(
    "doc",
    [
        {"tools": {"t": {"kind": "secret-kind-zq"}}},
        {"tools": {"t": {"kind": "delete", "scope": 3}}},
        {"tools": {"t": {"kind": "delete", "targets": "secret-zq"}}},
        {"tools": {"t": {"kind": "read", "probe": "yes"}}},
        {"tools": {"t": {"kind": "read", "extra-zq": 1}}},
        {"tools": []},
        ["secret-zq"],
    ],
)
def test_a_bad_mapping_is_refused_without_quoting_it(tmp_path, doc):
    path = tmp_path / "map.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InvalidInput) as info:
        load_mapping(path)
    assert "zq" not in str(info.value)


def test_a_mapping_that_is_not_json_or_not_there(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(InvalidInput, match="not JSON"):
        load_mapping(tmp_path / "bad.json")
    with pytest.raises(InvalidInput, match="cannot be read"):
        load_mapping(tmp_path / "missing.json")


def test_targets_are_the_innermost_names_and_scalar_objects():
    delete = ToolRule("delete", "name")
    assert targets({"entityNames": ["Alice", "Bob"]}, delete) == ["Alice", "Bob"]
    # The entity that keeps the observations is not what was deleted: its observations are.
    deletions = {"deletions": [{"entityName": "Alice", "observations": ["tea", "coffee"]}]}
    assert targets(deletions, delete) == ["tea", "coffee"]
    relation = {"from": "Alice", "to": "Bob", "relationType": "knows"}
    assert targets({"relations": [relation]}, delete) == [relation]
    assert targets({"subject": "alice", "user": "u1"}, ToolRule("delete", "mapping", scope="user")) == ["alice"]
    assert targets({"a": "x", "b": "y"}, ToolRule("delete", "mapping", targets=("b",))) == ["y"]
    assert targets({"n": 3}, delete) == []


def test_found_in_exact_strings_scalar_objects_and_free_text():
    graph = {"entities": [{"name": "Bob", "observations": ["met Alice at work"]}], "relations": []}
    values = answer_values(graph, ["not json: Carol likes tea"])
    assert not found_in("Alice", values)  # a mention is not the deleted entity
    assert found_in("Bob", values)
    assert found_in("Carol", values)  # in free text, anywhere
    rel = {"from": "Bob", "to": "Alice", "relationType": "knows"}
    assert not found_in(rel, values)
    assert found_in(rel, answer_values({"relations": [{**rel, "extra": 1}]}, []))
    assert target_key("Bob") in hit_keys(values)
    assert target_key(rel) in hit_keys(answer_values({"relations": [rel]}, []))


def test_probe_arguments_fill_strings_and_lists_or_nothing():
    search = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    opener = {
        "type": "object",
        "properties": {"names": {"type": "array", "items": {"type": "string"}}},
        "required": ["names"],
    }
    both = {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]}
    assert probe_arguments({"type": "object", "properties": {}}, ["a"]) == [{}]
    assert probe_arguments(search, ["a", "b"]) == [{"query": "a"}, {"query": "b"}]
    assert probe_arguments(opener, ["a", "b"]) == [{"names": ["a", "b"]}]
    assert probe_arguments(both, ["a"]) == []
    assert probe_arguments(search, []) == []
