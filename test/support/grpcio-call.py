"""One unary call with Python's grpcio, for the RPC servers' tests (test/support/foreign-clients.ts).

A generic call: no generated code, the request and the reply as raw bytes. The channel connects first, so that the
time measured is the call's. Prints "calling" just before the call, then one JSON line: the status's code (its name,
"DEADLINE_EXCEEDED"), details and trailing metadata, and the call's time on the monotonic clock.

Usage: grpcio-call.py <host:port> </pkg.Service/Method> <timeout in s> <request as hex> [metadata as JSON]
"""

import json
import sys
import time

import grpc


def main() -> None:
    target, method, timeout, request = sys.argv[1:5]
    metadata = tuple(json.loads(sys.argv[5]).items()) if len(sys.argv) > 5 else None
    with grpc.insecure_channel(target) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        call = channel.unary_unary(method)
        print("calling", flush=True)
        started = time.monotonic()
        try:
            _, outcome = call.with_call(bytes.fromhex(request), timeout=float(timeout), metadata=metadata)
            code, details, trailers = outcome.code(), outcome.details(), outcome.trailing_metadata()
        except grpc.RpcError as error:
            code, details, trailers = error.code(), error.details(), error.trailing_metadata()
        elapsed = (time.monotonic() - started) * 1000
    print(
        json.dumps(
            {
                "code": code.name,
                "details": details or "",
                "trailers": {key: value for key, value in (trailers or ()) if isinstance(value, str)},
                "elapsedMs": elapsed,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
