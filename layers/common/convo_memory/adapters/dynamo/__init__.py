"""DynamoDB stores, one per port (``convo_memory.ports``), over shared tables.

``stores.dynamo_stores`` builds them all for the conversations and runs tables; ``table``
holds the one error translation, ``items`` the item layout."""
