"""Workspaces, API tokens (stored only as hashes) and capabilities on DynamoDB."""

from __future__ import annotations

import json

from convo_memory.adapters.dynamo.table import DynamoTable, s
from convo_memory.domain.models import Capability


class DynamoTokenStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def put_workspace(self, workspace_id: str, name: str, created_at: str) -> None:
        self._table.call(
            "put_item",
            Item={
                "pk": s(f"WS#{workspace_id}"),
                "sk": s("WORKSPACE"),
                "name": s(name),
                "createdAt": s(created_at),
            },
        )

    def put_token(self, token_hash: str, workspace_id: str, name: str, created_at: str) -> bool:
        """Store a token hash; False when that hash already exists."""
        stored, _ = self._table.conditional(
            "put_item",
            Item={
                "pk": s(f"TOKEN#{token_hash}"),
                "sk": s("TOKEN"),
                "workspaceId": s(workspace_id),
                "name": s(name),
                "createdAt": s(created_at),
            },
            ConditionExpression="attribute_not_exists(pk)",
        )
        return stored

    def workspace_for_token(self, token_hash: str) -> str | None:
        # Strongly consistent: a token revoked a moment ago must not resolve.
        item = self._table.get({"pk": s(f"TOKEN#{token_hash}"), "sk": s("TOKEN")})
        return item["workspaceId"]["S"] if item else None

    def put_token_id(
        self, token_id: str, token_hash: str, workspace_id: str, created_at: str
    ) -> None:
        """The public id a token can be revoked by (the token itself is never stored)."""
        self._table.call(
            "put_item",
            Item={
                "pk": s(f"TOKENID#{token_id}"),
                "sk": s("TOKENID"),
                "tokenHash": s(token_hash),
                "workspaceId": s(workspace_id),
                "createdAt": s(created_at),
            },
        )

    def token_hash_for_id(self, token_id: str) -> str | None:
        item = self._table.get({"pk": s(f"TOKENID#{token_id}"), "sk": s("TOKENID")})
        return item["tokenHash"]["S"] if item else None

    def delete_token(self, token_hash: str, token_id: str) -> str | None:
        """Revoke a token: its workspace id, or None when no such token existed."""
        out = self._table.call(
            "delete_item",
            Key={"pk": s(f"TOKEN#{token_hash}"), "sk": s("TOKEN")},
            ReturnValues="ALL_OLD",
        )
        self._table.call("delete_item", Key={"pk": s(f"TOKENID#{token_id}"), "sk": s("TOKENID")})
        old = out.get("Attributes")
        return old["workspaceId"]["S"] if old else None


class DynamoCapabilityStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def put_capability(self, workspace_id: str, capability: Capability) -> None:
        self._table.call(
            "put_item",
            Item={
                "pk": s(f"WS#{workspace_id}"),
                "sk": s(f"CAP#{capability.id}"),
                "body": s(json.dumps(capability.to_stored_dict())),
            },
        )

    def get_capability(self, workspace_id: str, capability_id: str) -> Capability | None:
        item = self._table.get({"pk": s(f"WS#{workspace_id}"), "sk": s(f"CAP#{capability_id}")})
        return Capability.model_validate_json(item["body"]["S"]) if item else None

    def list_capabilities(self, workspace_id: str) -> list[Capability]:
        capabilities = [
            Capability.model_validate_json(item["body"]["S"])
            for item in self._table.query_all(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :cap)",
                ExpressionAttributeValues={":pk": s(f"WS#{workspace_id}"), ":cap": s("CAP#")},
            )
        ]
        capabilities.sort(key=lambda c: (c.created_at, c.id))
        return capabilities
