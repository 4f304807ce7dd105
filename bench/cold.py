"""Cold-start figures: each handler's ``import app`` against ``import boto3`` in fresh
interpreters, from the source tree and from ``make build``'s artifacts (as Lambda loads
them: read-only, no bytecode written), and the predict handler's first invocation
(bench/cold_probe.py)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.stats import median, ratio, verdict

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "cold_probe.py"
BUILD_DIR = ROOT / ".aws-sam" / "build"
# A handler's cold import, as a ratio to ``import boto3``: a function behind the HTTP API
# loads Powertools' router, and is held to the serving path's bound (from the source tree;
# from the built artifacts, whose layer carries its bytecode so that only app.py
# compiles); every other function (the authorizer, the queue workers, the schedule) to
# boto3's own time.
PREDICT_LIMIT = 1.3
BUILT_PREDICT_LIMIT = 1.0
IMPORT_LIMIT = 1.0


def import_limit(routed: bool, built: bool = False) -> float:
    """The most a function's cold ``import app`` may take, as a ratio to ``import boto3``
    (``routed``: it serves HttpApi routes)."""
    if routed:
        return BUILT_PREDICT_LIMIT if built else PREDICT_LIMIT
    return IMPORT_LIMIT


def routed_functions() -> set[str]:
    """The functions of template.yaml behind HttpApi routes."""
    from local_runtime.aws_resources import function_specs

    return {name for name, spec in function_specs().items() if spec.http_routes}


MARKER = "BENCH_RESULT "
WARM_REQUESTS = 5
TIMER = (
    "import time\n"
    "began = time.perf_counter()\n"
    "import {module}\n"
    "print('{marker}' + repr(time.perf_counter() - began))\n"
)


def probe_env() -> dict[str, str]:
    """A Lambda-like environment that cannot reach AWS (fake credentials, no IMDS)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_EC2_METADATA_DISABLED": "true",
            "POWERTOOLS_SERVICE_NAME": "convo-memory",
            "POWERTOOLS_METRICS_NAMESPACE": "ConvoMemoryBench",
            "PYTHONHASHSEED": "0",
        }
    )
    env.pop("PYTHONPATH", None)
    return env


def _result_line(stdout: str) -> str:
    for line in reversed(stdout.splitlines()):
        if line.startswith(MARKER):
            return line[len(MARKER) :]
    raise RuntimeError(f"no result in the probe's output:\n{stdout[-2000:]}")


def time_import(module: str, cwd: Path, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", TIMER.format(module=module, marker=MARKER)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"import {module} in {cwd} failed:\n{done.stderr[-2000:]}")
    return float(_result_line(done.stdout))


def handler_dirs() -> dict[str, Path]:
    """Logical id -> code directory, for every function of template.yaml."""
    from local_runtime.aws_resources import function_specs

    return {logical_id: spec.code_uri for logical_id, spec in function_specs().items()}


def handler_modules() -> dict[str, str]:
    """Logical id -> the module its Handler names (``app``, ``openapi.app``)."""
    from local_runtime.aws_resources import function_specs

    return {name: spec.handler.rpartition(".")[0] for name, spec in function_specs().items()}


def handler_module(code: Path, handler_module: str | None) -> str | None:
    """What a function's cold start imports from ``code``: its handler's module, else
    ``app`` (the streaming door's run.sh starts app.py); None when neither is there."""
    for module in (handler_module, "app"):
        if module and code.joinpath(*module.split(".")).with_suffix(".py").is_file():
            return module
    return None


def import_times(runs: int, progress: Callable[[str], None]) -> dict[str, Any]:
    env = probe_env()
    dirs = handler_dirs()
    routed = routed_functions()
    handlers = handler_modules()
    modules = {name: handler_module(path, handlers.get(name)) for name, path in dirs.items()}
    present = {name: path for name, path in dirs.items() if modules[name]}
    targets: list[tuple[str, str, Path]] = [("boto3", "boto3", dirs["PredictFunction"])]
    targets += [(name, str(modules[name]), path) for name, path in present.items()]
    samples: dict[str, list[float]] = {name: [] for name, _, _ in targets}
    for _name, module, cwd in targets:  # not counted: compiles .pyc, warms the page cache
        time_import(module, cwd, env)
    for run in range(runs):
        progress(f"import times, round {run + 1}/{runs}")
        shift = run % len(targets)  # interleaved, in a rotating order
        for name, module, cwd in targets[shift:] + targets[:shift]:
            samples[name].append(time_import(module, cwd, env))
    boto3_s = median(samples["boto3"])
    rows = []
    for name, path in dirs.items():
        row: dict[str, Any] = {"function": name, "dir": str(path.relative_to(ROOT))}
        if name in present:
            seconds = median(samples[name])
            row |= {"seconds": seconds, "ratio": ratio(seconds, boto3_s), "samples": samples[name]}
        else:
            row |= {"seconds": None, "ratio": None, "missing": True}
        if name in present:
            limit = import_limit(name in routed)
            row |= {"limit": limit, "verdict": verdict(row["ratio"], limit)}
        rows.append(row)
    return {"runs": runs, "boto3Seconds": boto3_s, "boto3Samples": samples["boto3"], "rows": rows}


def _predict_seed() -> dict[str, Any]:
    """Tables' items (a workspace, its capabilities, a session with a short history)
    and two API Gateway events for the predict route, made on the in-process stack."""
    from local_runtime.http_gateway import HttpRequest, build_http_event, match_route
    from tests.support.inprocess_api import REGION, inprocess_stack, new_workspace

    with inprocess_stack() as api:
        workspace, token = new_workspace(api, "bench-cold")
        body = {"capabilityId": "cap-generative", "externalRef": "bench-cold"}
        session = api.call("POST", "/v1/sessions", token=token, json_body=body).body["id"]
        path = "/v1/capabilities/cap-generative/predict"
        for i in range(3):
            api.call(
                "POST", path, token=token, json_body={"input": f"hi {i}", "sessionId": session}
            )
        client = api.container.infrastructure.clients["dynamodb"]
        items = client.scan(TableName=api.container.settings.table_name)["Items"]
        match = match_route(api.routes, "POST", path)
        assert match is not None
        events = []
        texts = ["the first request of a cold container"]
        texts += [f"and a warm one ({i})" for i in range(WARM_REQUESTS)]
        for text in texts:
            request = HttpRequest(
                method="POST",
                raw_path=path,
                raw_query="",
                headers=[("content-type", "application/json")],
                body=json.dumps({"input": text, "sessionId": session}).encode(),
            )
            events.append(
                build_http_event(
                    request,
                    match.route.route_key,
                    match.path_parameters,
                    {"workspaceId": workspace},
                )
            )
    return {"region": REGION, "items": items, "events": events}


def first_invocation(runs: int, progress: Callable[[str], None]) -> dict[str, Any]:
    predict_dir = handler_dirs()["PredictFunction"]
    seed = _predict_seed()
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
        seed_path = Path(tmp) / "seed.json"
        seed_path.write_text(json.dumps(seed), encoding="utf-8")
        for run in range(runs):
            progress(f"predict cold start, run {run + 1}/{runs}")
            done = subprocess.run(
                [sys.executable, str(PROBE), str(predict_dir), str(seed_path)],
                cwd=tmp,
                env=probe_env(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"cold-start probe failed:\n{done.stderr[-3000:]}")
            samples.append(json.loads(_result_line(done.stdout)))
    keys = ("importApp", "importBoto3", "buildContainer", "firstRequest", "warmRequest")
    figures = {key: median([s[key] for s in samples]) for key in keys}
    extra_boto3 = 0.0 if all(s["boto3ImportedByApp"] for s in samples) else figures["importBoto3"]
    cold_total = (
        figures["importApp"] + extra_boto3 + figures["buildContainer"] + figures["firstRequest"]
    )
    return {
        "runs": runs,
        "medianSeconds": figures,
        "boto3ImportedByApp": all(s["boto3ImportedByApp"] for s in samples),
        "coldTotalSeconds": cold_total,
    }


# --------------------------------------------------------------------------- built


def built_missing(build_dir: Path = BUILD_DIR) -> str | None:
    """Why the built artifacts cannot be measured here, or None."""
    if not (build_dir / "template.yaml").is_file():
        where = build_dir.relative_to(ROOT) if build_dir.is_relative_to(ROOT) else build_dir
        return f"make build has not run (no {where}/template.yaml)"
    if not (build_dir / "CommonLayer" / "python").is_dir():
        return "the build has no CommonLayer/python"
    if sys.version_info[:2] != (3, 13):
        return f"the built bytecode is for python 3.13, this is {sys.version.split()[0]}"
    return None


def _read_only(path: Path) -> None:
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            target = Path(root) / name
            target.chmod(target.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable(path: Path) -> None:
    for root, dirs, _files in os.walk(path):
        Path(root).chmod(Path(root).stat().st_mode | stat.S_IWUSR)
        for name in dirs:
            (Path(root) / name).chmod((Path(root) / name).stat().st_mode | stat.S_IWUSR)


def host_layer(built: Path, into: Path, *, bytecode: bool = True) -> Path:
    """A copy of the built layer this machine can import: the layer's own modules and
    bytecode, with this machine's build of each native extension beside the Lambda one
    (the build is for arm64 Linux; the pinned versions are the dev environment's)."""
    layer = into / "opt-python"
    shutil.copytree(built, layer, ignore=None if bytecode else shutil.ignore_patterns("*.pyc"))
    site = Path(sysconfig.get_paths()["purelib"])
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    for extension in list(layer.rglob("*.so")):
        if extension.name.endswith(suffix):
            continue
        module = extension.name.split(".", 1)[0]
        relative = extension.parent.relative_to(layer)
        native = site / relative / f"{module}{suffix}"
        if native.is_file():
            shutil.copy2(native, layer / relative / native.name)
    return layer


def _time_built(module: str, cwd: Path, path: list[Path], env: dict[str, str]) -> float:
    # -S: no site-packages processing (no editable install finder); the path is exactly
    # the function's code, the layer, then what the Lambda runtime provides (boto3).
    env = {
        **env,
        "PYTHONPATH": os.pathsep.join(str(p) for p in path),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    done = subprocess.run(
        [sys.executable, "-S", "-c", TIMER.format(module=module, marker=MARKER)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"import {module} in {cwd} failed:\n{done.stderr[-2000:]}")
    return float(_result_line(done.stdout))


def built_import_times(
    runs: int, progress: Callable[[str], None], build_dir: Path = BUILD_DIR
) -> dict[str, Any]:
    """Each handler's cold ``import app`` from the built artifacts, with no writable
    bytecode cache, as a ratio to ``import boto3`` in the same run; PredictFunction also
    from a copy of the layer without its bytecode, for comparison."""
    missing = built_missing(build_dir)
    if missing is not None:
        return {"built": False, "reason": missing}
    env = probe_env()
    runtime = Path(sysconfig.get_paths()["purelib"])  # boto3, as the Lambda runtime has it
    with tempfile.TemporaryDirectory(prefix="bench-built-") as tmp:
        root = Path(tmp)
        layer = host_layer(build_dir / "CommonLayer" / "python", root)
        bare = host_layer(build_dir / "CommonLayer" / "python", root / "bare", bytecode=False)
        code: dict[str, Path] = {}
        modules: dict[str, str] = {}
        handlers = handler_modules()
        for function in sorted(p for p in build_dir.iterdir() if p.is_dir()):
            module = handler_module(function, handlers.get(function.name))
            if module is None:
                continue
            modules[function.name] = module
            code[function.name] = root / "var-task" / function.name
            shutil.copytree(function, code[function.name])
        _read_only(root)
        try:
            targets: list[tuple[str, str, Path, list[Path]]] = [("boto3", "boto3", root, [runtime])]
            targets += [
                (name, modules[name], path, [path, layer, runtime]) for name, path in code.items()
            ]
            if "PredictFunction" in code:
                predict = code["PredictFunction"]
                targets.append(
                    ("PredictFunction, no bytecode", "app", predict, [predict, bare, runtime])
                )
            samples: dict[str, list[float]] = {name: [] for name, *_ in targets}
            for _name, module, cwd, path in targets:  # not counted: warms the page cache
                _time_built(module, cwd, path, env)
            for run in range(runs):
                progress(f"built import times, round {run + 1}/{runs}")
                shift = run % len(targets)
                for name, module, cwd, path in targets[shift:] + targets[:shift]:
                    samples[name].append(_time_built(module, cwd, path, env))
        finally:
            _writable(root)
    boto3_s = median(samples["boto3"])
    routed = routed_functions()
    rows = []
    for name in [*code, *(["PredictFunction, no bytecode"] if "PredictFunction" in code else [])]:
        seconds = median(samples[name])
        row: dict[str, Any] = {
            "function": name,
            "seconds": seconds,
            "ratio": ratio(seconds, boto3_s),
            "samples": samples[name],
        }
        if name in code:
            limit = import_limit(name in routed, built=True)
            row |= {"limit": limit, "verdict": verdict(row["ratio"], limit)}
        rows.append(row)
    return {
        "built": True,
        "runs": runs,
        "boto3Seconds": boto3_s,
        "boto3Samples": samples["boto3"],
        "rows": rows,
    }
