"""Cold imports as Lambda makes them: each function's ``app`` (or the layer's adapters)
imported by a fresh interpreter, which then says what it loaded. A subprocess each, so
they live in this tier rather than the unit tier (tests/unit/test_test_tiers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FUNCTIONS = REPO / "functions"


def import_in_a_fresh_interpreter(code: str, cwd: Path) -> None:
    """Run ``code`` in a new ``python`` in ``cwd`` (a function's folder: ``import app``
    finds its handler); it fails the test by failing an assertion of its own."""
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1"}
    subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, check=True)


def test_a_workers_cold_import_takes_neither_pydantic_nor_powertools_batch() -> None:
    for function in ("summarize", "repair_transcript", "erase_end_user", "copy_forks"):
        code = (
            "import sys\n"
            "import app\n"
            "heavy = {'pydantic', 'boto3', 'aws_lambda_powertools.utilities.batch'}\n"
            "found = heavy & set(sys.modules)\n"
            "assert not found, found\n"
        )
        import_in_a_fresh_interpreter(code, FUNCTIONS / function)


def test_a_routed_handlers_cold_import_loads_no_pydantic() -> None:
    """A signature's types are read on the first request (tests/unit/test_typed_routes.py
    checks the typed routes themselves)."""
    routed = sorted(p.parent for p in FUNCTIONS.glob("*/app.py") if "ApiResolver(" in p.read_text())
    code = (
        "import sys\n"
        "import app\n"
        "found = {'pydantic', 'convo_memory.api', 'boto3'} & set(sys.modules)\n"
        "assert not found, found\n"
        "assert app.app.declarations\n"
    )

    assert len(routed) >= 7
    for function in routed:
        import_in_a_fresh_interpreter(code, function)


def test_importing_the_adapters_does_not_import_boto3_or_urllib() -> None:
    code = (
        "import sys\n"
        "import convo_memory.adapters.providers.factory, convo_memory.adapters.registry\n"
        "import convo_memory.adapters.filters, convo_memory.adapters.summarizers\n"
        "import convo_memory.adapters.secrets, convo_memory.adapters.aws_clients\n"
        "heavy = {'boto3', 'botocore', 'urllib.request'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    import_in_a_fresh_interpreter(code, REPO)
