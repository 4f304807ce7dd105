#!/bin/sh
# Started by the AWS Lambda Web Adapter (AWS_LAMBDA_EXEC_WRAPPER=/opt/bootstrap): a small
# HTTP server on $PORT whose chunked responses the adapter streams to the Function URL.
export PYTHONPATH="/opt/python:${LAMBDA_TASK_ROOT:-.}:${PYTHONPATH}"
exec python3 "${LAMBDA_TASK_ROOT:-.}/app.py"
