"""The benchmark's capacity arithmetic: DynamoDB's billing rules on known items."""

from __future__ import annotations

from bench.capacity import (
    IndexSpec,
    TableSpec,
    index_write_units,
    item_size,
    read_units,
    value_size,
    write_units,
)

SPEC = TableSpec(
    ("pk", "sk"),
    (
        IndexSpec("byRef", ("gsi1pk", "gsi1sk"), "INCLUDE", ("metadata",)),
        IndexSpec("byActivity", ("gsi2pk", "gsi2sk"), "KEYS_ONLY"),
    ),
)


def head(mark: str, metadata: str = "{}") -> dict[str, dict[str, str]]:
    return {
        "pk": {"S": "SESSION#s1"},
        "sk": {"S": "SESSION"},
        "metadata": {"S": metadata},
        "lastActiveAt": {"S": mark},
        "gsi1pk": {"S": "WS#w#REF#u"},
        "gsi1sk": {"S": "2026#s1"},
        "gsi2pk": {"S": "ACTIVE#03"},
        "gsi2sk": {"S": mark},
    }


def test_item_size_counts_names_and_values_as_dynamodb_does() -> None:
    assert item_size({"pk": {"S": "abc"}}) == 2 + 3
    assert item_size({"é": {"S": "é"}}) == 2 + 2  # UTF-8 bytes
    assert value_size({"N": "12345"}) == 4  # 5 significant digits: 3 + 1
    assert value_size({"BOOL": True}) == 1
    assert value_size({"SS": ["ab", "c"]}) == 3
    assert value_size({"L": [{"S": "ab"}]}) == 3 + 1 + 2
    assert item_size(None) == 0


def test_reads_round_up_per_4_kb_and_halve_when_eventually_consistent() -> None:
    assert read_units(0, consistent=True) == 1
    assert read_units(4096, consistent=True) == 1
    assert read_units(4097, consistent=True) == 2
    assert read_units(4097, consistent=False) == 1


def test_writes_round_up_per_1_kb_of_the_larger_item() -> None:
    small, large = {"pk": {"S": "x"}}, {"pk": {"S": "x" * 1500}}
    assert write_units(None, small) == 1
    assert write_units(large, small) == 2
    assert write_units(small, None) == 1


def test_an_index_is_written_only_when_its_keys_or_projection_change() -> None:
    # A new head enters both indexes.
    assert index_write_units(SPEC, None, head("t1")) == 2
    # The mark moves: byActivity's key changes (delete + put); byRef projects neither
    # the mark nor gsi2sk, so it is not written.
    assert index_write_units(SPEC, head("t1"), head("t2")) == 2
    # Metadata changes: byRef projects it (one write); byActivity keys stay.
    assert index_write_units(SPEC, head("t1"), head("t1", '{"a":1}')) == 1
    # An item without index keys (a turn) writes no index.
    turn = {"pk": {"S": "SESSION#s1"}, "sk": {"S": "MSG#0000000001"}, "u": {"S": "hi"}}
    assert index_write_units(SPEC, None, turn) == 0
    # Deleting a head removes it from both.
    assert index_write_units(SPEC, head("t1"), None) == 2
