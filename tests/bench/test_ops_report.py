"""The benchmark's operations figures: cold imports from the built artifacts (make build)
and the price of the missing-header 401 decision."""

from __future__ import annotations

import compileall
import py_compile
import sys
import sysconfig
from pathlib import Path

import pytest

from bench.authorizer_cost import cost_per_million
from bench.cold import (
    BUILT_PREDICT_LIMIT,
    built_import_times,
    built_missing,
    host_layer,
    import_limit,
)
from bench.render import render_authorizer, render_built

HOST_SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")
LAMBDA_SUFFIX = ".cpython-313-aarch64-linux-gnu.so"


def fake_build(root: Path) -> Path:
    """A build directory as `sam build` leaves it: a template, the layer (with
    unchecked-hash bytecode) and two functions whose handlers import from the layer."""
    build = root / "build"
    layer = build / "CommonLayer" / "python"
    (layer / "shared").mkdir(parents=True)
    (layer / "shared" / "__init__.py").write_text("WHERE = 'layer'\n")
    compileall.compile_dir(
        layer, quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    for function in ("PredictFunction", "StudioFunction"):
        (build / function).mkdir()
        (build / function / "app.py").write_text("import shared\nassert shared.WHERE\n")
    (build / "template.yaml").write_text("Resources: {}\n")
    return build


def test_the_built_figure_says_when_make_build_has_not_run(tmp_path: Path) -> None:
    figure = built_import_times(1, lambda message: None, build_dir=tmp_path / "nothing")

    assert figure["built"] is False
    assert "make build has not run" in figure["reason"]
    assert "not measured, make build has not run" in render_built(figure)


def test_built_imports_run_from_the_build_with_nothing_written(tmp_path: Path) -> None:
    build = fake_build(tmp_path)
    before = sorted(str(path) for path in build.rglob("*"))

    figure = built_import_times(2, lambda message: None, build_dir=build)

    if sys.version_info[:2] != (3, 13):  # the build's bytecode is for Lambda's python3.13
        assert figure == {"built": False, "reason": built_missing(build)}
        assert "python 3.13" in figure["reason"]
        return
    assert built_missing(build) is None
    assert figure["built"] is True
    rows = {row["function"]: row for row in figure["rows"]}
    # The handlers imported the layer's module (only on the layer's path), twice each.
    assert set(rows) == {"PredictFunction", "StudioFunction", "PredictFunction, no bytecode"}
    assert all(len(row["samples"]) == 2 for row in rows.values())
    assert rows["PredictFunction"]["limit"] == BUILT_PREDICT_LIMIT
    # Every function has its line: behind the HTTP API, predict's bound; else boto3's.
    assert rows["StudioFunction"]["limit"] == import_limit(True, built=True) == 1.0
    assert import_limit(False, built=True) == import_limit(False) == 1.0
    assert all(rows[name]["verdict"] in ("PASS", "FAIL") for name in rows if "," not in name)
    assert sorted(str(path) for path in build.rglob("*")) == before  # no __pycache__ added
    assert "PredictFunction, no bytecode" in render_built(figure)


def test_the_host_layer_keeps_the_bytecode_and_adds_this_machines_extensions(
    tmp_path: Path,
) -> None:
    built = tmp_path / "python"
    (built / "pydantic_core").mkdir(parents=True)
    (built / "pydantic_core" / f"_pydantic_core{LAMBDA_SUFFIX}").write_bytes(b"arm64")
    (built / "pydantic_core" / "__pycache__").mkdir()
    (built / "pydantic_core" / "__pycache__" / "x.cpython-313.pyc").write_bytes(b"pyc")

    with_bytecode = host_layer(built, tmp_path / "a")
    without = host_layer(built, tmp_path / "b", bytecode=False)

    native = with_bytecode / "pydantic_core" / f"_pydantic_core{HOST_SUFFIX}"
    assert native.is_file() and native.stat().st_size > 1000  # the real extension
    assert (with_bytecode / "pydantic_core" / "__pycache__" / "x.cpython-313.pyc").is_file()
    assert list(without.rglob("*.pyc")) == []


def test_the_authorizer_costs_scale_with_its_invocations() -> None:
    uncached = cost_per_million(billed_ms=1, memory_mb=512, hit_rate=0.0)
    cached = cost_per_million(billed_ms=1, memory_mb=512, hit_rate=0.9)

    # 1M Lambda requests ($0.20) + 1M x 1 ms x 0.5 GB ($0.0067), on top of API Gateway.
    assert uncached["invocations"] == 1_000_000
    assert uncached["lambdaUsd"] == pytest.approx(0.20 + 500 * 0.0000133334)
    assert uncached["totalUsd"] == pytest.approx(1.00 + uncached["lambdaUsd"])
    assert cached["invocations"] == 100_000
    assert cached["lambdaUsd"] == pytest.approx(uncached["lambdaUsd"] / 10)


def test_the_authorizer_figure_names_both_designs() -> None:
    figure = {
        "runs": 10,
        "memoryMb": 512,
        "warmSeconds": {"known token": 0.0002, "unknown token": 0.0004, "no header": 0.0003},
        "billedMs": 1,
        "uncached": cost_per_million(1, 512, 0.0),
        "cached": [cost_per_million(1, 512, 0.9)],
        "tokenReadUsdPerMillionWorstCase": 0.125,
    }

    text = render_authorizer(figure)

    assert text.startswith("9. The missing-header 401")
    assert "uncached, no identity source (this stack)" in text and "1.2067" in text
    assert "90% hits" in text and "100000" in text
    assert '{"message":"Unauthorized"}' in text
