"""The benchmark's results (a JSON-able dict) as text. Pure: no I/O."""

from __future__ import annotations

from typing import Any

from bench.cold import IMPORT_LIMIT, PREDICT_LIMIT
from bench.headline import headline
from bench.stats import ms, num, ops_text, table, times, verdict

MAIN_TABLE = "conversations"
IDEMPOTENCY_TABLE = "idempotency"


def _title(number: int, text: str) -> str:
    heading = f"{number}. {text}"
    return f"{heading}\n{'=' * len(heading)}"


def _table_figures(tables: dict[str, Any], label: str) -> tuple[str, str, str]:
    figures = tables.get(label)
    if not figures:
        return "0", "0", "none"
    return num(figures["reads"], 2), num(figures["writes"], 2), ops_text(figures["ops"])


def _others(tables: dict[str, Any]) -> str:
    rest = {k: v for k, v in tables.items() if k not in (MAIN_TABLE, IDEMPOTENCY_TABLE)}
    if not rest:
        return "none"
    return "; ".join(f"{label}: {ops_text(v['ops'])}" for label, v in sorted(rest.items()))


def render_requests(figure: dict[str, Any]) -> str:
    rows = []
    details = []
    inconsistent = []
    for row in figure["rows"]:
        tables = row["tables"]
        conv_r, conv_w, conv_ops = _table_figures(tables, MAIN_TABLE)
        idem_r, idem_w, idem_ops = _table_figures(tables, IDEMPOTENCY_TABLE)
        rows.append([row["door"], row["key"], conv_r, conv_w, idem_r, idem_w, row["turns"]])
        details.append([row["door"], row["key"], conv_ops, idem_ops])
        if _others(tables) != "none":
            details[-1][-1] += f" | {_others(tables)}"
        if not row["consistent"]:
            inconsistent.append(f"{row['door']}/{row['key']}")
    doors = sorted({(r["door"], r["doorLabel"]) for r in figure["rows"]})
    out = [
        _title(1, "DynamoDB requests per turn on the serving path (warm container)"),
        "doors: " + "; ".join(f"{door} = {label}" for door, label in doors),
        "key: none = no Idempotency-Key; new = a fresh key per turn; replay = a retry"
        " with a key that already completed",
        "columns: DynamoDB requests per turn to the conversations table (conv) and to the"
        " idempotency table (idem), and how many turns were measured",
        "",
        table(
            ["door", "key", "conv reads", "conv writes", "idem reads", "idem writes", "turns"],
            rows,
        ),
        "",
        table(["door", "key", "conversations table ops", "idempotency table ops"], details),
    ]
    if inconsistent:
        out.append(
            "note: the measured turns differed (figures are averages): " + ", ".join(inconsistent)
        )
    else:
        out.append("every measured turn of a row made exactly the same requests")
    out.append(
        "new key: Powertools records the key before the turn (PutItem, conditional) and"
        " stores the response after it (UpdateItem); replay: that conditional PutItem fails"
        " and returns the stored response, so the retry costs one (failed) write, no read"
        " and nothing on the conversations table."
    )
    return "\n".join(out)


def render_storage_cost(figure: dict[str, Any]) -> str:
    rows = [
        [
            num(r["history"]),
            num(r["summaryChars"]),
            ops_text(r["requests"]),
            num(r["readUnits"], 1),
            num(r["tableWriteUnits"], 1),
            num(r["indexWriteUnits"], 1),
            num(r["totalUnits"], 1),
            f"${r['dollarsPerMillion']:.2f}",
        ]
        for r in figure["rows"]
    ]
    move = figure["markMove"]
    paces = [
        [p["pace"], num(p["unitsPerTurn"], 2), f"${p['dollarsPerMillion']:.2f}"]
        for p in figure["paces"]
    ]
    return "\n".join(
        [
            _title(2, "DynamoDB requests, capacity units and cost per turn against history"),
            "warm predict turn, 120-character messages. Capacity units, as DynamoDB bills"
            " them: RRU = read request units (one per 4 KB a read returns), WRU = write"
            " request units (one per 1 KB of the larger of the item before and after; table"
            " and index writes, the indexes from template.yaml's projections). On-demand"
            " us-east-1: $0.125 per million RRU, $0.625 per million WRU; 'per M turns' = the"
            " DynamoDB dollars of a million such turns",
            table(
                [
                    "history msgs",
                    "summary chars",
                    "requests",
                    "RRU",
                    "table WRU",
                    "index WRU",
                    "units",
                    "per M turns",
                ],
                rows,
            ),
            "",
            f"the turn that moves the head's activity mark (at most once per"
            f" {num(figure['granularityHours'], 2)} h per session): {ops_text(move['requests'])},"
            f" {num(move['totalUnits'], 1)} units ({num(figure['markExtraUnits'], 1)} more)."
            " Amortized over a day of turns (worst history length):",
            table(["pace", "units per turn", "per M turns"], paces),
        ]
    )


def render_cold(imports: dict[str, Any], first: dict[str, Any] | None) -> str:
    rows = []
    for row in imports["rows"]:
        if row.get("missing"):
            rows.append([row["function"], row["dir"], "-", "-", "app.py not available"])
            continue
        mark = ""
        if "verdict" in row:
            mark = f"{row['verdict']} (limit {row['limit']:.1f}x)"
        rows.append([row["function"], row["dir"], ms(row["seconds"]), times(row["ratio"]), mark])
    out = [
        _title(3, "Cold import time of each handler, as a ratio to `import boto3`"),
        f"median of {imports['runs']} fresh interpreters each, interleaved; "
        f"import boto3 = {ms(imports['boto3Seconds'])} ms",
        table(["function", "code", "import app ms", "vs boto3", "check"], rows),
        "check: PASS when the import takes at most its limit, as a ratio to boto3's own"
        f" import ({PREDICT_LIMIT}x for a function behind an API route, {IMPORT_LIMIT}x for"
        " the others, which do less), FAIL otherwise",
    ]
    if first is not None:
        f = first["medianSeconds"]
        boto3_note = (
            "already imported by the handler"
            if first["boto3ImportedByApp"]
            else "paid by the first container build"
        )
        out += [
            "",
            f"PredictFunction cold first invocation (median of {first['runs']} fresh interpreters)",
            table(
                ["step", "ms"],
                [
                    ["import app", ms(f["importApp"])],
                    [f"import boto3 ({boto3_note})", ms(f["importBoto3"])],
                    ["build the container (clients, services)", ms(f["buildContainer"])],
                    ["first request (cold caches, first client calls)", ms(f["firstRequest"])],
                    ["cold total", ms(first["coldTotalSeconds"])],
                    ["a warm request (median of the next 5), for comparison", ms(f["warmRequest"])],
                ],
            ),
            "requests run against moto in the same process: their absolute time is moto's,"
            " not DynamoDB's; the cold-vs-warm difference is the handler's own first-use cost.",
        ]
    return "\n".join(out)


def render_built(built: dict[str, Any]) -> str:
    """Section 3's figures from ``make build``'s artifacts (or why there are none)."""
    heading = "From the built artifacts (.aws-sam/build), as Lambda loads them"
    if not built.get("built"):
        return f"{heading}: not measured, {built['reason']}"
    rows = []
    for row in built["rows"]:
        mark = f"{row['verdict']} (limit {row['limit']:.1f}x)" if "verdict" in row else ""
        rows.append([row["function"], ms(row["seconds"]), times(row["ratio"]), mark])
    return "\n".join(
        [
            f"{heading}: read-only copies, PYTHONDONTWRITEBYTECODE=1, the function's code and"
            " the layer first on the path (the layer's native extensions swapped for this"
            " machine's build of the same versions);",
            f"median of {built['runs']} fresh interpreters each, interleaved;"
            f" import boto3 = {ms(built['boto3Seconds'])} ms",
            table(["function", "import app ms", "vs boto3", "check"], rows),
            "the layer ships unchecked-hash bytecode (layers/common/Makefile), so a cold start"
            " compiles only the handler's app.py (about 1 ms); 'no bytecode' is the same"
            " layer without it, as a build without the compile step would be.",
        ]
    )


def render_authorizer(figure: dict[str, Any]) -> str:
    warm = figure["warmSeconds"]
    uncached = figure["uncached"]
    rows = [
        [
            "uncached, no identity source (this stack)",
            num(uncached["invocations"]),
            f"{uncached['lambdaUsd']:.4f}",
            f"{uncached['totalUsd']:.4f}",
        ]
    ]
    for cost in figure["cached"]:
        rows.append(
            [
                f"cached per Authorization header, {cost['hitRate']:.0%} hits",
                num(cost["invocations"]),
                f"{cost['lambdaUsd']:.4f}",
                f"{cost['totalUsd']:.4f}",
            ]
        )
    durations = ", ".join(f"{label} {seconds * 1000:.2f} ms" for label, seconds in warm.items())
    return "\n".join(
        [
            _title(9, "The missing-header 401: the authorizer's cost per million requests"),
            f"authorizer warm duration (median of {figure['runs']}, in process): {durations};"
            f" billed {figure['billedMs']} ms (the minimum) at {figure['memoryMb']} MB, arm64;"
            " USD per million requests",
            table(["design", "authorizer runs", "authorizer USD", "+ API Gateway USD"], rows),
            "uncached: every 401 is the contract's body; cached: a request without the header"
            ' gets API Gateway\'s own {"message":"Unauthorized"} and the authorizer never runs.',
            "prices: HTTP API $1.00/M requests, Lambda $0.20/M requests + $0.0000133334 per"
            " GB-s (a gigabyte of memory for a second; arm64), us-east-1. Token look-ups are"
            " cached per container either way (CacheTtlSeconds); at worst one read per request,"
            f" ${figure['tokenReadUsdPerMillionWorstCase']:.3f}/M.",
        ]
    )


def render_stream(figure: dict[str, Any]) -> str:
    rows = []
    for row in figure["rows"]:
        conv = row["tables"].get(MAIN_TABLE, {"reads": 0, "writes": 0})
        rows.append(
            [
                row["door"],
                ms(row["firstEventSeconds"]),
                ms(row["totalSeconds"]),
                times(row["ratio"]),
                num(row["events"]),
                num(conv["reads"], 2),
                num(conv["writes"], 2),
            ]
        )
    return "\n".join(
        [
            _title(4, "Stream: time to first event as a ratio of the full response"),
            f"slow embedded provider: {figure['chunkDelaySeconds'] * 1000:.0f} ms before each"
            f" chunk; median of {figure['rows'][0]['runs']} turns per door, interleaved;"
            " first/full = the first event's time over the whole response's; reads and writes:"
            " DynamoDB requests per turn",
            table(
                [
                    "door",
                    "first event ms",
                    "full response ms",
                    "first/full",
                    "events",
                    "reads/turn",
                    "writes/turn",
                ],
                rows,
            ),
            "stream-buffered goes through API Gateway (HttpApi), which buffers: the first"
            " event arrives with the last (ratio 1.0 by construction).",
        ]
    )


def render_summarizer(figure: dict[str, Any]) -> str:
    title = _title(5, "Predict latency with the summarizer working vs failing")
    if not figure.get("available"):
        return f"{title}\n{figure.get('reason', 'not measured')}"
    rows = []
    for mode in ("working", "failing"):
        m = figure["modes"][mode]
        rows.append(
            [
                mode,
                m["turns"],
                ms(m["medianSeconds"]),
                ms(m["p95Seconds"]),
                m["summarizeInvocations"],
                m["jobsSucceeded"],
                m["jobsFailed"],
                f"{m['sessionsWithSummary']}/{m['sessions']}",
            ]
        )
    out = [
        title,
        "SummarizeFunction consumes the summary queue in a background thread (as its SQS"
        " event source would) while predict turns are timed; failing = CONVO_SUMMARIZER_FAIL=1;"
        " p95 = the time 95% of turns beat; jobs: summary jobs that ran and failed;"
        " summarized: sessions that got their summary",
        table(
            [
                "summarizer",
                "turns",
                "median ms",
                "p95 ms",
                "invocations",
                "jobs ok",
                "jobs failed",
                "summarized",
            ],
            rows,
        ),
        f"failing / working: median {times(figure['medianRatio'])},"
        f" p95 {times(figure['p95Ratio'])}",
        "the worker shares this process with the timed turns: one Python interpreter, and"
        " moto (the local AWS emulator every figure runs on) serving one request at a time,"
        " so its work slows the foreground in both modes; in AWS it runs in containers of"
        " its own. The deterministic check is the request count below: the same in both.",
    ]
    for mode in ("working", "failing"):
        own = figure["modes"][mode].get("predictRequests")
        if own:
            parts = "; ".join(
                f"{k}: {ops_text(v['ops'])}" for k, v in sorted(own["tables"].items())
            )
            out.append(f"predict's own requests per turn, summarizer {mode}: {parts}")
    if figure.get("workerErrors"):
        out.append("worker errors: " + "; ".join(figure["workerErrors"]))
    return "\n".join(out)


def render_content_filter(figure: dict[str, Any]) -> str:
    rows = [
        [
            row["case"],
            row["pattern"],
            "-" if row["programSize"] is None else row["programSize"],
            row["answer"],
            ms(row["medianSeconds"]),
        ]
        for row in figure["rows"]
    ]
    return "\n".join(
        [
            _title(6, f"Content filter time on a {figure['answerChars']:,}-character answer"),
            f"EmbeddedContentFilter.check, median of {figure['runs']} runs; patterns on RE2"
            f" (program budget {figure['programBudget']} instructions per capability), terms"
            " as plain substring searches",
            table(["case", "pattern / terms", "RE2 program", "answer", "ms"], rows),
            f"worst pattern: the slowest of {figure['familiesTried']} hard pattern families,"
            " each at its largest size within the budget, on each answer. RE2's time is"
            " linear in the answer (about length x program size) and it releases the GIL;"
            " a backtracking engine needs 2^n steps for (a+)+$ on n a's.",
        ]
    )


def render_agent_turn(figure: dict[str, Any]) -> str:
    units = figure["dynamodb"]
    share = figure["digestShare"]
    rows = [
        ["model calls", figure["modelCalls"]],
        [
            "tool calls",
            f"{figure['toolCalls']} (signed: {'all' if figure['signaturesValid'] else 'NOT ALL'})",
        ],
        ["stop reason", figure["stopReason"]],
        ["DynamoDB requests", ops_text(units["requests"])],
        ["DynamoDB read units", num(units["readUnits"], 2)],
        ["DynamoDB write units", num(units["tableWriteUnits"] + units["indexWriteUnits"], 2)],
        ["DynamoDB $ per million turns", f"${units['dollarsPerMillion']:.2f}"],
        ["KMS requests (warm)", figure["kmsRequests"]],
        ["tool output characters", f"{figure['toolOutputChars']:,}"],
        [
            "digest characters replayed next turn",
            f"{figure['digestChars']:,} (cap {figure['digestMaxChars']:,})",
        ],
        ["next turn's prompt characters", f"{figure['nextPromptChars']:,}"],
        ["digest share of that prompt", "-" if share is None else f"{share:.0%}"],
    ]
    return "\n".join(
        [
            _title(7, f"An agent turn with {figure['tools']} webhook tools (warm container)"),
            "embedded agent, tools on a local server; the next turn asks a follow-up and"
            " replays the digest as fenced data",
            table(["figure", "value"], rows),
        ]
    )


def _share_text(share: float | None) -> str:
    return "-" if share is None else f"{share:.0%}"


def render_summary_cost(figure: dict[str, Any]) -> str:
    turn, summary, share = figure["turn"], figure["summary"], figure["summaryShare"]

    def row(label: str, key: str, digits: int = 2, share_key: str | None = None) -> list[str]:
        return [
            label,
            num(turn[key], digits),
            num(summary[key], digits),
            _share_text(share.get(share_key or key)),
        ]

    dollars_turn, dollars_summary = turn["dollars"], summary["dollars"]
    rows = [
        row("model calls", "modelCalls"),
        [
            "model tokens (in + out, ~chars/4)",
            f"{num(turn['modelInputTokens'], 0)} + {num(turn['modelOutputTokens'], 0)}",
            f"{num(summary['modelInputTokens'], 0)} + {num(summary['modelOutputTokens'], 0)}",
            _share_text(share.get("modelTokens")),
        ],
        row("DynamoDB requests", "dynamoRequests"),
        [
            "DynamoDB units (read + write)",
            f"{num(turn['readUnits'], 2)} + {num(turn['writeUnits'], 2)}",
            f"{num(summary['readUnits'], 2)} + {num(summary['writeUnits'], 2)}",
            _share_text(share.get("dynamoUnits")),
        ],
        row("SQS requests", "sqsRequests"),
        row("Lambda invocations", "lambdaInvocations"),
        [
            "cost per M turns",
            f"${dollars_turn['total'] * 1e6:,.2f}",
            f"${dollars_summary['total'] * 1e6:,.2f}",
            _share_text(share.get("dollars")),
        ],
    ]
    parts = [
        f"${dollars_summary[k] * 1e6:,.2f} {k}" for k in ("model", "dynamodb", "sqs", "lambda")
    ]
    dollar_share = share.get("dollars")
    mark = verdict(dollar_share, figure["shareLimit"])
    return "\n".join(
        [
            _title(8, f"Rolling summary cost per turn over a {figure['turns']}-turn conversation"),
            f"one session at a human pace (each summary job runs before the next turn), replay"
            f" window of {figure['replayMessages']} messages, batches of"
            f" {figure['batchTurns']} turns; the capability's own (fake, local) model answers"
            " and summarizes",
            table(["per turn", "the turn itself", "its summary", "summary share"], rows),
            f"summary, per M turns: {', '.join(parts)}; turn DynamoDB ops:"
            f" {ops_text(turn['dynamoOps'])}; summary DynamoDB ops:"
            f" {ops_text(summary['dynamoOps'])}",
            f"summary share of the total cost: {_share_text(dollar_share)}"
            f" {mark} (limit {figure['shareLimit']:.0%}); without the model (DynamoDB, SQS,"
            f" Lambda): {_share_text(share.get('infrastructureDollars'))}; turns whose prompt"
            " lacked an omitted"
            f" message (one neither replayed nor yet summarized): {figure['turnsWithAGap']};"
            f" at the end the summary folds messages 1 to {figure['finalThroughSeq']} and the"
            f" replay window leaves out messages 1 to {figure['finalOmitted']} (the summary"
            " works a batch ahead)",
            "prices: model $0.80 / M input and $4 / M output tokens (a Claude 3.5 Haiku class"
            " model), SQS $0.40 / M requests, Lambda $0.20 / M requests (duration: figure"
            " 10), DynamoDB on demand as in figure 2. SQS requests: the trigger's send"
            " and the event source's receive and delete of each job; its empty polls cost the"
            " same whatever the traffic.",
        ]
    )


def render_million_turns(figure: dict[str, Any]) -> str:
    rows = [
        [c["component"], c["perTurn"], f"${c['usd']:,.2f}", f"{c['usd'] / figure['totalUsd']:.0%}"]
        for c in figure["components"]
    ]
    rows.append(["total, without the model", "", f"${figure['totalUsd']:,.2f}", "100%"])
    functions = ", ".join(
        f"{name} {use['invocations']:.2f} x {use['gbSeconds'] * 1000 / use['invocations']:.1f}"
        " GB-ms"
        for name, use in sorted(figure["functions"].items())
        if use["invocations"]
    )
    records = ", ".join(
        f"{name} {use['metricRecords'] / use['invocations']:.2f}"
        for name, use in sorted(figure["functions"].items())
        if use["invocations"]
    )
    logs = figure["logBytes"]
    budget = logs["budget"]
    within = "within" if logs["functions"] <= budget else "OVER"
    return "\n".join(
        [
            _title(10, "A million turns by component (us-east-1, on demand)"),
            f"the counts of figure 8 (the turn and its share of the summary, over"
            f" {figure['turns']} turns) times published prices; Lambda duration is the"
            " handler time measured here (moto in process, a local model answering at once)",
            "GB-ms: gigabyte-milliseconds, what Lambda bills (memory x time); RRU and WRU as"
            " in figure 2; EMF: CloudWatch's Embedded Metric Format, metrics written as log"
            " lines (one record per invocation)",
            table(["component", "per turn", "per M turns", "share"], rows),
            f"invocations per turn x billed time: {functions}",
            f"log bytes per turn: functions {logs['functions']:,.0f} ({within} the budget of"
            f" {budget:,}; EMF metrics {logs['metrics']:,.0f} of it), Lambda's"
            f" START/END/REPORT {logs['platform']:,.0f}, access log {logs['accessLog']:,.0f}",
            f"EMF metrics records per invocation: {records}",
            f"each second a turn waits on its model adds ${figure['perModelSecondUsd']:,.2f} per"
            f" M turns of {figure['servingFunction']} duration; the model itself (reference"
            f" price, figure 8): ${figure['modelUsd']:,.2f} per M turns",
        ]
    )


def render(results: dict[str, Any]) -> str:
    meta = results["meta"]
    header = (
        f"convo-memory bench ({'quick' if meta['quick'] else 'full'} run,"
        f" python {meta['python']}, {meta['cpus']} cpus, {meta['seconds']:.0f} s)"
    )
    if meta.get("log"):
        header += f"\nthe service's own logs while measuring: {meta['log']}"
    parts = [headline(results), header]
    serving = results.get("serving")
    if serving:
        parts.append(render_requests(serving["requestsPerTurn"]))
        parts.append(render_storage_cost(serving["storageCost"]))
    if "importTimes" in results:
        parts.append(render_cold(results["importTimes"], results.get("firstInvocation")))
    if "builtImportTimes" in results:
        parts.append(render_built(results["builtImportTimes"]))
    if serving:
        parts.append(render_stream(serving["streamFirstEvent"]))
    if "summarizer" in results:
        parts.append(render_summarizer(results["summarizer"]))
    if "contentFilter" in results:
        parts.append(render_content_filter(results["contentFilter"]))
    if "agentTurn" in results:
        parts.append(render_agent_turn(results["agentTurn"]))
    if "summaryCost" in results:
        parts.append(render_summary_cost(results["summaryCost"]))
    if "authorizer" in results:
        parts.append(render_authorizer(results["authorizer"]))
    if "millionTurns" in results:
        parts.append(render_million_turns(results["millionTurns"]))
    if "rateLimit" in results:
        from bench.resilience import render_rate_limit

        title = _title(11, "The turn rate limit: DynamoDB cost per turn")
        parts.append(render_rate_limit(results["rateLimit"], table, title))
    if "outage" in results:
        from bench.resilience import render_outage

        title = _title(12, "Turns through an outage of DynamoDB writes and SQS sends")
        parts.append(render_outage(results["outage"], table, title))
    if "recallCost" in results:
        from bench.recall_cost import render_recall_cost

        title = _title(13, "Opening a session with recall, and its turns: DynamoDB cost")
        parts.append(render_recall_cost(results["recallCost"], table, title))
    if "chatDoor" in results:
        from bench.chat_door import render_chat_door

        title = _title(14, "The OpenAI-compatible door next to predict: one turn")
        parts.append(render_chat_door(results["chatDoor"], table, title))
    if "promptCache" in results:
        from bench.prompt_cache import render_prompt_cache

        title = _title(15, "Prompts a provider can cache: replay.alignment 1 and 10")
        parts.append(render_prompt_cache(results["promptCache"], table, title))
    if "erasure" in results:
        from bench.erasure_cost import render_erasure

        title = _title(16, "Erasing an end user: DynamoDB, SQS and Lambda per erasure")
        parts.append(render_erasure(results["erasure"], table, title))
    if "slowTenants" in results:
        from bench.slow_tenants import render_slow_tenants

        title = _title(17, "A slow tenant next to a fast one: the slow-turn cap off and on")
        parts.append(render_slow_tenants(results["slowTenants"], table, title))
    if "forks" in results:
        from bench.forks_cost import render_forks

        title = _title(18, "Forks: creating one, its copy job, and a turn on it")
        parts.append(render_forks(results["forks"], table, title))
    if "appTools" in results:
        from bench.app_tools import render_app_tools

        title = _title(19, "The app's own tools: a turn offered them, a pause, a continuation")
        parts.append(render_app_tools(results["appTools"], table, title))
    if "responsesDoor" in results:
        from bench.responses_door import render_responses_door

        title = _title(20, "The Responses door next to predict: one turn, and its other calls")
        parts.append(render_responses_door(results["responsesDoor"], table, title))
    if "langchainHistory" in results:
        from bench.langchain_history import render_langchain_history

        title = _title(21, "A turn next to LangChain's DynamoDB chat history")
        parts.append(render_langchain_history(results["langchainHistory"], table, title))
    if "limiterScale" in results:
        from bench.limiter_scale import render_limiter_scale

        title = _title(22, "The turn limiter at scale: one workspace through many environments")
        parts.append(render_limiter_scale(results["limiterScale"], table, title))
    if "attachments" in results:
        from bench.attachments_cost import render_attachments

        title = _title(23, "A turn with an image: DynamoDB units, S3 requests and bytes")
        parts.append(render_attachments(results["attachments"], table, title))
    where = f" (its traceback is in {meta['log']})" if meta.get("log") else ""
    for name, error in (results.get("errors") or {}).items():
        parts.append(f"[{name}] not measured: {error}{where}")
    return "\n\n".join(parts) + "\n"
