"""The SQS workers' shared policy: typed job records, a batch's correlation, logging,
backoff and redelivery (the summary, repair and erasure queues)."""
