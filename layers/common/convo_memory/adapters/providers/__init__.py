"""Model providers: embedded (deterministic, no network), Amazon Bedrock (Converse),
OpenAI-compatible chat completions, and the classic embedded scorer.

Build them with ``convo_memory.adapters.providers.factory.build_provider``; this package
imports nothing eagerly so that cold starts pay only for the provider in use.
"""
