"""A workspace's capabilities on DynamoDB (one item per capability, its JSON as stored)."""

from __future__ import annotations

import json

from convo_memory.adapters.dynamo.table import DynamoTable, string_value
from convo_memory.domain.models import Capability


class DynamoCapabilityStore:
    def __init__(self, table: DynamoTable) -> None:
        self._table = table

    def put_capability(self, workspace_id: str, capability: Capability) -> None:
        self._table.call(
            "put_item",
            Item={
                "pk": string_value(f"WS#{workspace_id}"),
                "sk": string_value(f"CAP#{capability.id}"),
                "body": string_value(json.dumps(capability.to_stored_dict())),
            },
        )

    def get_capability(self, workspace_id: str, capability_id: str) -> Capability | None:
        item = self._table.get(
            {"pk": string_value(f"WS#{workspace_id}"), "sk": string_value(f"CAP#{capability_id}")}
        )
        return Capability.model_validate_json(item["body"]["S"]) if item else None

    def list_capabilities(self, workspace_id: str) -> list[Capability]:
        capabilities = [
            Capability.model_validate_json(item["body"]["S"])
            for item in self._table.query_all(
                KeyConditionExpression="pk = :pk AND begins_with(sk, :cap)",
                ExpressionAttributeValues={
                    ":pk": string_value(f"WS#{workspace_id}"),
                    ":cap": string_value("CAP#"),
                },
            )
        ]
        capabilities.sort(key=lambda c: (c.created_at, c.id))
        return capabilities
