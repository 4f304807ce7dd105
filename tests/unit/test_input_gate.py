"""The input gate's rules, one by one (pure: no handler, no AWS)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from convo_memory.api import SessionCreate, SessionPatch
from convo_memory.domain import request_rules
from convo_memory.domain.errors import (
    CapabilityNotFound,
    InvalidJson,
    NotFound,
    PayloadTooLarge,
    RunNotFound,
    SessionNotFound,
    ValidationFailed,
)
from convo_memory.edge import input_gate


def nested(levels: int) -> str:
    """A JSON object ``levels`` deep (the top-level object counts as one)."""
    return '{"a":' * (levels - 1) + "{}" + "}" * (levels - 1)


class TestBody:
    def test_a_utf8_json_object_is_returned_as_parsed(self) -> None:
        raw = '{"input": "héllo \\ud83d\\ude00", "n": 1.5, "k": [1, null, true]}'.encode()

        assert input_gate.read_json_object(raw) == {
            "input": "héllo \U0001f600",
            "n": 1.5,
            "k": [1, None, True],
        }

    def test_a_string_body_and_a_base64_body_read_the_same(self) -> None:
        text = '{"input": "héllo"}'

        assert input_gate.read_json_object(text) == {"input": "héllo"}
        encoded = base64.b64encode(text.encode()).decode()
        assert input_gate.read_json_object(encoded, base64_encoded=True) == {"input": "héllo"}

    @pytest.mark.parametrize(
        "raw",
        [
            pytest.param(b"", id="empty"),
            pytest.param(None, id="absent"),
            pytest.param(b"[1]", id="array"),
            pytest.param(b'"text"', id="string"),
            pytest.param(b"{", id="truncated"),
            pytest.param(b'{"a": 1} {"b": 2}', id="two documents"),
            pytest.param(b'\xef\xbb\xbf{"a": 1}', id="utf-8 BOM"),
            pytest.param('{"a": 1}'.encode("utf-16"), id="utf-16 with BOM"),
            pytest.param('{"a": 1}'.encode("utf-16-le"), id="utf-16 without BOM"),
            pytest.param('{"a": 1}'.encode("utf-32"), id="utf-32"),
            pytest.param(b'{"a": "\xc3"}', id="truncated utf-8 sequence"),
            pytest.param(b'{"a": "\xed\xa0\x80"}', id="encoded surrogate (CESU)"),
            pytest.param(b'{"a": NaN}', id="NaN"),
            pytest.param(b'{"a": Infinity}', id="Infinity"),
            pytest.param(b'{"a": -Infinity}', id="-Infinity"),
            pytest.param(b'{"a": 1e309}', id="1e309"),
            pytest.param(b'{"a": -1e400}', id="-1e400"),
            pytest.param(b'{"a": 2' + b"0" * 309 + b"}", id="int beyond double range"),
            pytest.param(b'{"a": 1' + b"0" * 5000 + b"}", id="5000-digit int"),
            pytest.param(nested(33).encode(), id="33 levels"),
            pytest.param(b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", id="200k levels"),
        ],
    )
    def test_what_is_not_a_utf8_json_object_within_bounds_is_400(self, raw: Any) -> None:
        with pytest.raises(InvalidJson) as refused:
            input_gate.read_json_object(raw)

        assert refused.value.status == 400 and refused.value.code == "invalid_json"

    def test_a_raw_lone_surrogate_in_a_string_body_is_not_utf8(self) -> None:
        with pytest.raises(InvalidJson):
            input_gate.read_json_object('{"a": "\ud800"}')

    def test_invalid_base64_is_400(self) -> None:
        with pytest.raises(InvalidJson):
            input_gate.read_json_object("not base64!", base64_encoded=True)

    def test_nesting_up_to_the_limit_and_the_largest_doubles_are_accepted(self) -> None:
        assert input_gate.read_json_object(nested(32).encode())
        body = input_gate.read_json_object(b'{"a": 1.7976931348623157e308, "b": -5e-324}')
        assert body["a"] == 1.7976931348623157e308

    @pytest.mark.parametrize(
        "raw",
        [
            b'{"a": "\\ud800"}',
            b'{"a": "x\\udfff"}',
            b'{"\\udc00": 1}',
            b'{"a": [{"b": ["ok", "\\ud83d"]}]}',
            b'{"a": "\\ude00\\ud83d"}',  # a pair in the wrong order is two lone halves
        ],
    )
    def test_an_unpaired_surrogate_anywhere_is_422(self, raw: bytes) -> None:
        with pytest.raises(ValidationFailed) as refused:
            input_gate.read_json_object(raw)

        assert refused.value.status == 422

    def test_too_deep_beats_a_surrogate_so_the_answer_does_not_depend_on_walk_order(
        self,
    ) -> None:
        raw = ('{"s": "\\ud800", "deep": ' + nested(40) + "}").encode()

        with pytest.raises(InvalidJson):
            input_gate.read_json_object(raw)

    def test_a_body_over_the_bound_is_413_before_it_is_parsed(self) -> None:
        raw = b"{" + b" " * input_gate.MAX_BODY_BYTES + b"}"

        with pytest.raises(PayloadTooLarge) as refused:
            input_gate.read_json_object(raw)

        assert refused.value.status == 413


class TestHeadersIdsQuery:
    def test_the_idempotency_key_header_is_optional_and_found_in_any_case(self) -> None:
        assert input_gate.idempotency_key({}) is None
        assert input_gate.idempotency_key({"IDEMPOTENCY-KEY": "order-1"}) == "order-1"
        assert input_gate.idempotency_key({"idempotency-key": " ~" * 100}) == " ~" * 100

    @pytest.mark.parametrize("key", ["", "k" * 256, "é", "a\tb", "a\x00b", "\x7f"])
    def test_a_bad_idempotency_key_is_422(self, key: str) -> None:
        with pytest.raises(ValidationFailed):
            input_gate.idempotency_key({"Idempotency-Key": key})

    @pytest.mark.parametrize(
        "value", ["ses_0123456789abcdef0123", "cap-generative", "run_ab", "A" * 128]
    )
    def test_ids_like_ours_pass(self, value: str) -> None:
        request_rules.check_path_id("sessionId", value)

    @pytest.mark.parametrize(
        ("name", "error"),
        [
            ("sessionId", SessionNotFound),
            ("session_id", SessionNotFound),
            ("capabilityId", CapabilityNotFound),
            ("capability_id", CapabilityNotFound),
            ("runId", RunNotFound),
            ("other", NotFound),
        ],
    )
    @pytest.mark.parametrize("value", ["x" * 129, "", "a/b", "a b", "é", "a.b", "x" * 3000])
    def test_an_implausible_id_is_the_404_of_its_kind(
        self, name: str, error: type[Exception], value: str
    ) -> None:
        with pytest.raises(error) as refused:
            request_rules.check_path_id(name, value)

        assert getattr(refused.value, "status", None) == 404
        assert value not in str(refused.value) or not value  # never echoed back

    def test_query_values_are_bounded_and_valid_unicode(self) -> None:
        input_gate.check_query({"externalRef": "r" * 256, "limit": "10"})
        input_gate.check_query(None)
        for bad in (
            {"nextToken": "t" * 2049},
            {"n" * 65: "v"},
            {"externalRef": "a\ud800"},
        ):
            with pytest.raises(ValidationFailed):
                input_gate.check_query(bad)

    def test_external_ref_is_required_and_at_most_256_characters(self) -> None:
        assert input_gate.external_ref("r" * 256) == "r" * 256
        for bad in (None, "", "r" * 257):
            with pytest.raises(ValidationFailed):
                input_gate.external_ref(bad)
        field = SessionCreate.model_fields["external_ref"]
        assert any(
            getattr(rule, "max_length", None) == request_rules.MAX_EXTERNAL_REF_CHARS
            for rule in field.metadata
        )


class TestSchema:
    def test_schema_violations_are_422_with_details(self) -> None:
        with pytest.raises(ValidationFailed) as refused:
            request_rules.parse_model(SessionCreate, {"externalRef": "x"})

        assert refused.value.status == 422
        assert refused.value.details and refused.value.details[0]["loc"] == ["capabilityId"]

    @pytest.mark.parametrize(
        "extra",
        [
            {"principal": {f"c{i}": "v" for i in range(33)}},
            {"principal": {"": "v"}},
            {"principal": {"k" * 65: "v"}},
            {"principal": {"k": "v" * 1025}},
            {"principal": {"k": 1}},
            {"principal": ["k"]},
            {"metadata": json.loads(nested(9))},
            {"metadata": {"list": [[[[[[[[]]]]]]]]}},
            {"metadata": {"k": "é" * 4100}},  # 8,200 bytes of UTF-8
            {"metadata": []},
            {"externalRef": "r" * 257},
        ],
    )
    def test_session_fields_out_of_bounds_are_422(self, extra: dict[str, Any]) -> None:
        body = {"capabilityId": "cap-generative", "externalRef": "end-user", **extra}

        with pytest.raises(ValidationFailed):
            request_rules.parse_model(SessionCreate, body)

    def test_the_same_bounds_hold_for_a_patch(self) -> None:
        for body in (
            {"metadata": json.loads(nested(9))},
            {"principal": {"k" * 65: "v"}},
            {"externalRef": "r" * 257},
        ):
            with pytest.raises(ValidationFailed):
                request_rules.parse_model(SessionPatch, body)

    def test_session_fields_at_their_bounds_are_accepted(self) -> None:
        body = {
            "capabilityId": "cap-generative",
            "externalRef": "r" * 256,
            "principal": {f"{i:02d}" + "k" * 62: "v" * 1024 for i in range(32)},
            "metadata": json.loads(nested(8)) | {"text": "é" * 4000},
        }

        parsed = request_rules.parse_model(SessionCreate, body)

        assert parsed.principal is not None and len(parsed.principal) == 32


@pytest.mark.parametrize(
    ("data", "loc", "path"),
    [
        ({"stream": "yes"}, ["stream"], "stream"),
        ({"stop": 5}, ["stop", "constrained-str"], "stop"),
        ({"messages": [{"content": 5}]}, ["messages", "0", "content", "str"], "messages.0.content"),
        ({"messages": [{}]}, ["messages", "0", "role"], "messages.0.role"),
        ({}, ["model"], "model"),
        ({"a": [1]}, ["a", "3"], "a"),
    ],
)
def test_a_refusals_field_is_the_path_of_what_was_sent(
    data: dict[str, Any], loc: list[str], path: str
) -> None:
    assert request_rules.field_path(data, loc) == path
