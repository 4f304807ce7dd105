"""Workspaces and their API tokens on DynamoDB (a token is stored only as its hash)."""

from __future__ import annotations

from convo_memory.adapters.dynamo.table import DynamoTable, string_value


class DynamoTokenStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def put_workspace(self, workspace_id: str, name: str, created_at: str) -> None:
        self._table.call(
            "put_item",
            Item={
                "pk": string_value(f"WS#{workspace_id}"),
                "sk": string_value("WORKSPACE"),
                "name": string_value(name),
                "createdAt": string_value(created_at),
            },
        )

    def put_token(self, token_hash: str, workspace_id: str, name: str, created_at: str) -> bool:
        """Store a token hash; False when that hash already exists."""
        stored, _ = self._table.conditional(
            "put_item",
            Item={
                "pk": string_value(f"TOKEN#{token_hash}"),
                "sk": string_value("TOKEN"),
                "workspaceId": string_value(workspace_id),
                "name": string_value(name),
                "createdAt": string_value(created_at),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return stored

    def workspace_for_token(self, token_hash: str) -> str | None:
        # Strongly consistent: a token revoked a moment ago must not resolve.
        item = self._table.get(
            {"pk": string_value(f"TOKEN#{token_hash}"), "sk": string_value("TOKEN")}
        )
        return item["workspaceId"]["S"] if item else None

    def put_token_id(
        self, token_id: str, token_hash: str, workspace_id: str, created_at: str
    ) -> None:
        """The public id a token can be revoked by (the token itself is never stored)."""
        self._table.call(
            "put_item",
            Item={
                "pk": string_value(f"TOKENID#{token_id}"),
                "sk": string_value("TOKENID"),
                "tokenHash": string_value(token_hash),
                "workspaceId": string_value(workspace_id),
                "createdAt": string_value(created_at),
            },
        )

    def token_hash_for_id(self, token_id: str) -> str | None:
        item = self._table.get(
            {"pk": string_value(f"TOKENID#{token_id}"), "sk": string_value("TOKENID")}
        )
        return item["tokenHash"]["S"] if item else None

    def delete_token(self, token_hash: str, token_id: str) -> str | None:
        """Revoke a token: its workspace id, or None when no such token existed."""
        out = self._table.call(
            "delete_item",
            Key={"pk": string_value(f"TOKEN#{token_hash}"), "sk": string_value("TOKEN")},
            ReturnValues="ALL_OLD",
        )
        self._table.call(
            "delete_item",
            Key={"pk": string_value(f"TOKENID#{token_id}"), "sk": string_value("TOKENID")},
        )
        old = out.get("Attributes")
        return old["workspaceId"]["S"] if old else None
