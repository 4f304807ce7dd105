"""Agent tools: webhooks (signed, URL policy), the built-in demo tools, the toolbox of a
capability, and the sealing of webhook signing secrets."""
