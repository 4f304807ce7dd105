"""The edge every request passes: the input gate, the turn edge (rate limit, idempotency,
time budget, counting), the one error mapping, the Powertools resolver glue and the
OpenAPI document made from the routes."""
