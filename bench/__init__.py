"""The benchmark: ``make bench`` (``python -m bench [--quick] [--json]``).

Figures, all measured in one run, nothing leaves the machine (moto in process). The
report opens with a headline (``bench/headline.py``): at most 12 plain lines, each
computed from one figure of the same run and naming it.

1. DynamoDB requests per turn on the serving path, warm, by door and operation, with
   and without an Idempotency-Key (the idempotency table's requests apart).
2. Items and bytes read per turn at 10, 100 and 1,000 messages of history.
3. Each handler's cold ``import app`` as a ratio to ``import boto3`` (fresh
   interpreters), and the predict handler's cold first invocation, step by step.
4. The streaming door's time to first event as a ratio of the full response, next to
   the buffered (HttpApi) door, with a slow embedded model.
5. Predict latency while the asynchronous summarizer works and while it fails.
6. The embedded content filter's time on a 30,000-character answer: the worst RE2
   pattern found within a capability's bounds, next to a plain pattern and blocked terms.
7. One agent turn that calls three webhook tools: model calls, tool calls, DynamoDB
   requests and capacity units, KMS requests; the digest characters the next turn
   replays and their share of its prompt.
8. What the rolling summary costs per turn over a 100-turn conversation (model calls
   and tokens, DynamoDB units, SQS requests, Lambda invocations) next to the turn's own,
   and its share of the total.
9. The missing-header 401: the uncached authorizer's cost per million requests next to
   a cached one's.
10. A million turns by component (Lambda requests and duration, API Gateway, DynamoDB,
    SQS, CloudWatch Logs), from figure 8's counts and published prices.
11. The turn rate limit's DynamoDB requests and write units per turn (steady, a burst,
    a flood) and its cost per million turns.
12. Turns through an outage: answered turns lost and duplicated, and the seconds until
    every repair landed, while 25% and 60% of transcript writes and SQS sends fail.
13. Opening a session with ``recall: {sessions: 5}``: DynamoDB requests and capacity
    units, next to opening one without recall; and a warm turn of such a session next
    to one without recall (the same requests).
14. A turn through the OpenAI-compatible door (by the app's session key) next to the
    same turn through predict: DynamoDB requests and capacity units, and the handler's
    added time (median of interleaved turns).
15. Prompts a provider can cache: over a 200-turn conversation with ``replay.alignment``
    1 and 10, the share of input tokens that repeat the previous prompt's prefix; and
    what Bedrock bills for the model's input per million turns at two human paces (a
    turn a minute; a 7-minute pause every 10 turns, on simulated clocks) with 5-minute
    and 1-hour cache TTLs (each write priced at its premium), against no caching.
16. Erasing an end user with 10 and 100 sessions (traces kept, and erased): DynamoDB
    requests and capacity units, SQS messages and Lambda invocations per erasure.
17. A slow tenant (an agent whose tool takes 5 s, from 60 clients) next to a fast one,
    through PredictFunction's 50 environments, with ``WorkspaceMaxSlowTurns`` off and at
    8: each tenant's turns answered and refused, the fast tenant's latency; and the
    cap's write units for a fast turn and a slow one.
18. Forks: creating one of a 10-message and of a 1,000-message session (time, DynamoDB
    requests and units) next to opening a session; the job that copies the rest of a
    1,000-message fork; a warm turn on the fork next to one on a plain session.
19. The app's own tools (v4): DynamoDB requests and capacity units of a plain turn, a
    turn offered the app's tools that calls none (the same), a turn that pauses for one
    and its continuation (one write more in all, beside the digest and trace of any
    turn that used a tool).
20. A turn through the Responses door (v4) next to the same turn through predict: by
    ``previous_response_id`` (a chain, each response after the newest) and by
    ``conversation``: DynamoDB requests and capacity units, and the handler's added time
    (median of interleaved turns); and what reading, listing the input of and deleting a
    stored response cost, and a response after an older one (a fork at its answer).
21. A turn next to LangChain's ``DynamoDBChatMessageHistory`` at 10, 100 and 1,000
    messages: DynamoDB requests, capacity units and dollars per million turns, and the
    prompt tokens the model is sent (LangChain's requests replayed on moto, with its own
    message format).
22. The turn limiter at scale (``bench/limiter_scale.py``): one workspace at its limit
    of 10, 100, 1,000, 5,000 and 10,000 turns a second through many simulated Lambda
    environments, each with a limiter of its own, on moto with a simulated clock: every
    write on the limiter's table counted per item and second; the hottest item's writes
    per turn against the contract's ``200 / R``; the share refused at 90% of the limit;
    floods from 20 and 1,000 environments against one exact limiter, second by second.
23. (v5) A turn with an image: a turn without attachments, one sending a new 500 KB
    image, the next turn (the image replayed) and the same image again in another
    session: DynamoDB requests and capacity units, S3 requests and bytes; a turn without
    attachments costs the same DynamoDB units whatever its window holds.

It is a report: it exits 0 whatever the figures are (1 only when one could not be
measured). While it measures, the service's own logs go to a file (``--log``, default
``.bench/bench.log``) and a terminal shows one progress line; then the figures.
"""
