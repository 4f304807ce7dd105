"""Published on-demand prices the benchmark multiplies its measured counts by.

us-east-1, from AWS's pricing pages as of 2025 (DynamoDB after the November 2024
reduction), without free tiers or volume discounts. One place, so that every figure
prices a request the same way.
"""

from __future__ import annotations

# Lambda, arm64 (the template's architecture).
LAMBDA_USD_PER_MILLION_REQUESTS = 0.20
LAMBDA_ARM_USD_PER_GB_SECOND = 0.0000133334
# API Gateway HTTP API: the first 300 million requests a month, per 512 KB.
HTTP_API_USD_PER_MILLION_REQUESTS = 1.00
# DynamoDB on demand, standard table class.
DYNAMODB_USD_PER_MILLION_READ_UNITS = 0.125
DYNAMODB_USD_PER_MILLION_WRITE_UNITS = 0.625
# SQS standard queues, per request (a batch of up to 10 messages is one request).
SQS_USD_PER_MILLION_REQUESTS = 0.40
# CloudWatch Logs, standard log class: ingestion per GB (storage, $0.03 per GB-month of
# compressed data, is left out: it depends on LogRetentionDays and compression).
LOGS_USD_PER_GB_INGESTED = 0.50
# A reference model: Claude 3.5 Haiku on Bedrock (the service does not own the model).
MODEL_USD_PER_MILLION_INPUT_TOKENS = 0.80
MODEL_USD_PER_MILLION_OUTPUT_TOKENS = 4.00
# Its prompt cache on Bedrock: writes at 1.25 times the input price, reads at a tenth,
# and a cache point counts only past the model's minimum prefix (Claude 3.5 Haiku: 2,048
# tokens; 1,024 to 4,096 on other models). A cached prefix lives 5 minutes after its last
# use; with a cache point's ``ttl: 1h`` an hour, for writes at twice the input price
# (Anthropic's ratio for 1-hour writes; reads cost the same).
MODEL_USD_PER_MILLION_CACHE_WRITE_TOKENS = 1.00
MODEL_USD_PER_MILLION_CACHE_WRITE_1H_TOKENS = 1.60
MODEL_USD_PER_MILLION_CACHE_READ_TOKENS = 0.08
MODEL_MIN_CACHED_PREFIX_TOKENS = 2_048
