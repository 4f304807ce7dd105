"""(v5) What an attachment is, from its bytes, and what the service refuses: types by
magic bytes (DOCX and XLSX by their container), UTF-8 for the text types, sizes and
pixels, counts per message, a capability's setting; what a turn's record keeps of it
(well under 300 bytes) and the name Bedrock is sent."""

from __future__ import annotations

import pytest

from convo_memory.domain.attachments import (
    MAX_FILENAME_BYTES,
    AttachmentPolicy,
    FileRef,
    InlineFile,
    bedrock_document_name,
    check_counts,
    check_file,
    check_policy,
    decode_refs,
    encode_refs,
    inline_file_id,
    parse_inline_id,
    ref_of,
)
from convo_memory.domain.errors import PayloadTooLarge, ValidationFailed
from convo_memory.domain.file_types import image_size, sniffed
from tests.support.sample_files import gif, jpeg, office, padded_png, pdf, png, webp


@pytest.mark.parametrize(
    ("data", "code", "size"),
    [
        (png(3, 2), "png", (3, 2)),
        (jpeg(4, 5), "jpeg", (4, 5)),
        (gif(3, 1), "gif", (3, 1)),
        (webp(6, 7), "webp", (6, 7)),
        (pdf(), "pdf", None),
        (office("docx"), "docx", None),
        (office("xlsx"), "xlsx", None),
    ],
)
def test_a_files_type_and_pixels_come_from_its_bytes(data: bytes, code: str, size: object) -> None:
    assert sniffed(data) == code
    assert image_size(code, data) == size


def test_a_declared_type_must_agree_with_the_bytes() -> None:
    checked = check_file(InlineFile(png(), "image/png", "cat.png", "messages.0.content.1", "image"))
    assert (checked.type.code, checked.kind, checked.filename) == ("png", "image", "cat.png")

    with pytest.raises(ValidationFailed) as refused:
        check_file(InlineFile(png(), "application/pdf", "cat.pdf", "input.0.content.1"))
    assert refused.value.param == "input.0.content.1"
    assert "PDF" in refused.value.message

    with pytest.raises(ValidationFailed):  # a ZIP that is no Word document
        check_file(InlineFile(office("xlsx"), None, "report.docx", "file"))


def test_text_types_are_utf8_and_named_by_type_or_extension() -> None:
    checked = check_file(InlineFile(b"a,b\n1,2\n", None, "t.csv", "file"))
    assert checked.type.code == "csv"
    with pytest.raises(ValidationFailed):
        check_file(InlineFile(b"\xff\xfe bad", "text/plain", "t.txt", "file"))
    with pytest.raises(ValidationFailed):  # a PNG called text is not text
        check_file(InlineFile(png(), "text/plain", "t.txt", "file"))


def test_an_image_part_takes_images_only_and_unknown_types_are_refused() -> None:
    with pytest.raises(ValidationFailed):
        check_file(InlineFile(pdf(), "application/pdf", None, "x", "image"))
    with pytest.raises(ValidationFailed) as refused:
        check_file(InlineFile(b"MZ\x90\x00", "application/x-msdownload", None, "x"))
    assert "does not take" in refused.value.message


def test_sizes_and_pixels_over_the_limits_are_refused_naming_the_part() -> None:
    with pytest.raises(PayloadTooLarge) as too_large:
        check_file(InlineFile(padded_png(3_750_001), "image/png", None, "input.0.content.0"))
    assert too_large.value.param == "input.0.content.0"
    assert "3,750,000" in too_large.value.message
    with pytest.raises(ValidationFailed) as too_wide:
        check_file(InlineFile(gif(8001, 1), "image/gif", None, "x"))
    assert "8000" in too_wide.value.message


def test_a_message_carries_at_most_20_images_and_5_documents() -> None:
    check_counts([("image", f"m.{i}") for i in range(20)] + [("document", "d")] * 5)
    with pytest.raises(ValidationFailed) as refused:
        check_counts([("image", f"messages.0.content.{i}") for i in range(21)])
    assert refused.value.param == "messages.0.content.20"
    with pytest.raises(ValidationFailed):
        check_counts([("document", "d")] * 6)


def test_a_capability_that_takes_no_images_refuses_one_naming_it() -> None:
    check_policy(None, [("image", "x")])
    check_policy(AttachmentPolicy(images=False), [("document", "x")])
    with pytest.raises(ValidationFailed) as refused:
        check_policy(AttachmentPolicy(images=False), [("image", "input.0.content.1")])
    assert refused.value.param == "input.0.content.1"
    assert "attachments.images" in refused.value.message


def test_a_turns_record_keeps_a_reference_well_under_300_bytes() -> None:
    long_name = "ünïcödé-" * 40 + ".pdf"
    checked = check_file(InlineFile(pdf(), "application/pdf", long_name, "file"))
    assert len(checked.filename.encode()) <= MAX_FILENAME_BYTES
    owner = "u" + "a" * 24
    ref = ref_of(checked, inline_file_id(owner, checked.digest), stored="0a1b2c3d")

    encoded = encode_refs([ref])

    assert len(encoded.encode()) <= 300
    assert decode_refs(encoded) == [ref]
    assert decode_refs(encoded)[0].stored == "0a1b2c3d"
    assert parse_inline_id(ref.file_id) == (owner, checked.digest)
    shown = ref.to_json_dict()
    assert shown == {
        "type": "document",
        "fileId": ref.file_id,
        "filename": checked.filename,
        "bytes": len(pdf()),
        "mimeType": "application/pdf",
    }


def test_a_document_name_is_made_to_bedrocks_rules_and_unique() -> None:
    taken: set[str] = set()
    assert bedrock_document_name("Q3 report (final)_v2.PDF", taken) == "Q3 report (final) v2"
    assert bedrock_document_name("Q3  report (final) v2.pdf", taken) == "Q3 report (final) v2 (2)"
    assert bedrock_document_name("...", taken) == "document"


def test_a_reference_names_its_kind_by_its_type() -> None:
    ref = FileRef(
        type="image", file_id="file-x", filename="a.webp", bytes=3, mime_type="image/webp"
    )
    assert ref.code == "webp"
