"""(v5) The Files API, as OpenAI's SDKs call it: upload a file (``multipart/form-data``,
the input gate's one exception to JSON), list the workspace's uploads, read one, read
its content (a redirect to a short-lived URL when it is more than a response carries)
and delete it. A file belongs to the workspace; a turn attaches it by its id."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response

from convo_memory.domain.errors import FileNotFound, PayloadTooLarge, ValidationFailed
from convo_memory.domain.file_types import TYPES
from convo_memory.edge.api_contract import answers
from convo_memory.edge.resolver import (
    ApiResolver,
    Query,
    api,
    container,
    json_response,
    raw_body,
    text_response,
    workspace_id,
)
from convo_memory.observability import http_handler

app = ApiResolver()
UPLOAD_FORM = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file", "purpose"],
                    "properties": {
                        "file": {"type": "string", "format": "binary"},
                        "purpose": {"enum": ["user_data", "vision", "assistants"]},
                        "expires_after[anchor]": {"const": "created_at"},
                        "expires_after[seconds]": {
                            "type": "integer",
                            "minimum": 3600,
                            "maximum": 2592000,
                        },
                    },
                }
            }
        },
    }
}
# The bytes, as the type they were stored as.
CONTENT = {
    mime: {"schema": {"type": "string", "format": "binary"}}
    for mime in ("application/octet-stream", *(file_type.mime for file_type in TYPES))
}
REDIRECT: Any = {
    "description": "The content is more than a response carries: read it at this short-lived "
    "URL (Location).",
    "headers": {"Location": {"schema": {"type": "string"}}},
}


@app.post(
    "/v1/files",
    summary="OpenAI-compatible: upload a file (multipart/form-data; at most 4 MB)",
    tags=["openai"],
    responses=answers(200, PayloadTooLarge, openai=True),
    openapi_extensions=UPLOAD_FORM,
)
def upload_file() -> Response[api.FileObject]:
    from convo_memory.edge.multipart import read_form

    form = read_form(app.current_event.headers.get("content-type"), raw_body(app))
    if form.file is None:
        raise ValidationFailed("file is required: the form's file part", param="file")
    uploaded = container().files.upload(
        workspace_id(app),
        form.file.data,
        form.file.filename,
        form.file.content_type,
        form.fields.get("purpose", ""),
        _expires_after(form.fields),
    )
    return json_response(200, api.file_json(uploaded))


def _expires_after(fields: dict[str, str]) -> int | None:
    """``expires_after[seconds]`` (anchored at ``created_at``), as OpenAI's SDK sends it."""
    anchor, seconds = fields.get("expires_after[anchor]"), fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return None
    if anchor not in (None, "created_at") or seconds is None or not seconds.isdigit():
        raise ValidationFailed(
            "expires_after must be {anchor: created_at, seconds}", param="expires_after"
        )
    return int(seconds)


@app.get(
    "/v1/files",
    summary="OpenAI-compatible: the workspace's uploaded files",
    tags=["openai"],
    responses=answers(200, openai=True),
)
def list_files(
    limit: Annotated[int, Query(ge=1, le=10000, description="Page size.")] = 100,
    after: Annotated[str | None, Query(max_length=128, description="A file id.")] = None,
) -> Response[api.FileList]:
    files, more = container().files.list(workspace_id(app), min(limit, 100), after)
    return json_response(200, api.file_list(files, more))


@app.get(
    "/v1/files/<file_id>",
    summary="OpenAI-compatible: a file (an upload, or an attachment's id)",
    tags=["openai"],
    responses=answers(200, FileNotFound, openai=True),
)
def get_file(file_id: str) -> Response[api.FileObject]:
    return json_response(200, api.file_json(container().files.get(workspace_id(app), file_id)))


@app.delete(
    "/v1/files/<file_id>",
    summary="OpenAI-compatible: delete an uploaded file",
    tags=["openai"],
    responses=answers(200, FileNotFound, openai=True),
)
def delete_file(file_id: str) -> Response[api.FileDeleted]:
    container().files.delete(workspace_id(app), file_id)
    return json_response(200, {"id": file_id, "object": "file", "deleted": True})


@app.get(
    "/v1/files/<file_id>/content",
    summary="OpenAI-compatible: a file's bytes",
    tags=["openai"],
    responses={**answers(200, FileNotFound, openai=True, content=CONTENT), 302: REDIRECT},
)
def file_content(file_id: str) -> Response[Any]:
    content = container().files.content(workspace_id(app), file_id)
    if content.url is not None:
        return text_response(302, "", headers={"Location": content.url})
    headers = {"Content-Disposition": f'attachment; filename="{_ascii(content.file.filename)}"'}
    return Response(200, content_type=content.file.mime_type, body=content.data, headers=headers)


def _ascii(filename: str) -> str:
    return "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )


@http_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
