"""Conversation memory for stateless predictions.

``domain`` is pure (no AWS, no Powertools); ``services`` are the use cases and receive
their ports; ``adapters`` speak to DynamoDB, SQS and model providers; ``bootstrap``
is the one composition root.
"""
