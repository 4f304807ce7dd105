"""The stack's attachments bucket behind a low-level S3 client, with one error
translation: capacity and availability errors become ``StoreUnavailable``, a missing
object is None, anything else ``StoreRejected``. The client is built on first use, so
a function that never touches an attachment never builds one (cold start)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from convo_memory.domain.errors import StoreRejected, StoreUnavailable

MISSING = frozenset({"NoSuchKey", "404", "NotFound"})
UNAVAILABLE = frozenset(
    {"SlowDown", "InternalError", "ServiceUnavailable", "503", "500", "RequestTimeout"}
)


def _translate(exc: Exception) -> Exception:
    from botocore.exceptions import ClientError

    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in UNAVAILABLE:
            return StoreUnavailable(f"S3 unavailable ({code})")
        return StoreRejected(f"S3 refused the request ({code or 'unknown error'})")
    return StoreUnavailable(f"S3 unreachable ({type(exc).__name__})")


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


class Bucket:
    """Objects of one bucket; ``client()`` builds (or returns) the S3 client."""

    def __init__(self, client: Callable[[], Any], name: str) -> None:
        self._client = client
        self.name = name

    def put(self, key: str, data: bytes, content_type: str, tags: str = "") -> None:
        """Write an object (``tags``: URL-encoded, for the lifecycle backstop)."""
        extra = {"Tagging": tags} if tags else {}
        self._call("put_object", Key=key, Body=data, ContentType=content_type, **extra)

    def get(self, key: str) -> bytes | None:
        """The object's bytes; None when there is none."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            out = self._client().get_object(Bucket=self.name, Key=key)
            return bytes(out["Body"].read())
        except ClientError as exc:
            if _code(exc) in MISSING:
                return None
            raise _translate(exc) from exc
        except BotoCoreError as exc:
            raise _translate(exc) from exc

    def delete(self, keys: list[str]) -> int:
        """Delete objects (absent ones included), a thousand a request."""
        for begin in range(0, len(keys), 1000):
            chunk = [{"Key": key} for key in keys[begin : begin + 1000]]
            self._call("delete_objects", Delete={"Objects": chunk, "Quiet": True})
        return len(keys)

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix``."""
        token: str | None = None
        while True:
            extra = {"ContinuationToken": token} if token else {}
            out = self._call("list_objects_v2", Prefix=prefix, **extra)
            yield from (entry["Key"] for entry in out.get("Contents", []))
            token = out.get("NextContinuationToken")
            if not token:
                return

    def link(self, key: str, seconds: int, filename: str | None = None) -> str:
        """A presigned GET of ``key``, valid ``seconds`` (no request is made)."""
        params: dict[str, Any] = {"Bucket": self.name, "Key": key}
        if filename:
            params["ResponseContentDisposition"] = f'inline; filename="{_quoted(filename)}"'
        url: str = self._client().generate_presigned_url(
            "get_object", Params=params, ExpiresIn=seconds
        )
        return url

    def _call(self, operation: str, **kwargs: Any) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return getattr(self._client(), operation)(Bucket=self.name, **kwargs)
        except (ClientError, BotoCoreError) as exc:
            raise _translate(exc) from exc


def _quoted(filename: str) -> str:
    return "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
