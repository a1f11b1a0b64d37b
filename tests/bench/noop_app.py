"""The floor for the throughput benchmark: trainguard's server stack with a handler that decides nothing.

Same routes as webhook/serve/app.py (/validate, /mutate, /healthz, /readyz), same stack (Starlette on
uvicorn with httptools, uvloop and TLS, orjson), same uvicorn settings as webhook/serve/server.py. The
admission handlers read the body, parse the AdmissionReview with orjson, and answer allowed with
the request's uid. Whatever trainguard's app costs beyond this is the price of deciding.

With `--mutate-patch FILE` (a JSON patch), /mutate answers every review with that patch, deciding
nothing still: set beside trainguard through the API server, it separates what the API server
spends applying a patch from what trainguard spends deciding it.

    python tests/bench/noop_app.py --tls-cert certs/tls.crt --tls-key certs/tls.key --port 8444
"""

from __future__ import annotations

import argparse
import base64
import ssl
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

_JSON = "application/json"


def create_noop_app(mutate_patch: list[Any] | None = None) -> Starlette:
    patch = (
        {"patchType": "JSONPatch", "patch": base64.b64encode(orjson.dumps(mutate_patch)).decode()}
        if mutate_patch
        else {}
    )

    async def answer(request: Request, extra: dict[str, str]) -> Response:
        try:
            review = orjson.loads(await request.body())
            uid = review["request"]["uid"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return Response(b'{"error":"malformed AdmissionReview"}', status_code=400, media_type=_JSON)
        answer = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True, **extra},
        }
        return Response(orjson.dumps(answer), media_type=_JSON)

    async def admit(request: Request) -> Response:
        return await answer(request, {})

    async def mutate(request: Request) -> Response:
        return await answer(request, patch)

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    async def readyz(request: Request) -> Response:
        return Response(b'{"status":"ready"}', media_type=_JSON)

    return Starlette(
        routes=[
            Route("/validate", admit, methods=["POST"]),
            Route("/mutate", mutate, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tls-cert", required=True)
    parser.add_argument("--tls-key", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8444)
    parser.add_argument("--mutate-patch", help="a JSON patch file /mutate answers every review with")
    args = parser.parse_args(argv)
    mutate_patch = None
    if args.mutate_patch:
        with open(args.mutate_patch, "rb") as f:
            mutate_patch = orjson.loads(f.read())
    # The settings of webhook.serve.server.build(), minus what only trainguard has (reload, drain).
    config = uvicorn.Config(
        create_noop_app(mutate_patch),
        host=args.host,
        port=args.port,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
        http="httptools",
        loop="uvloop",
        lifespan="on",
        log_config=None,
        log_level="warning",
        access_log=False,
        proxy_headers=False,
        server_header=False,
        # trainguard's keep-alive: with uvicorn's default of 5 s, a connection the API server
        # reuses just as the no-op closes it fails the call (EOF), as happened between batches.
        timeout_keep_alive=120,
    )
    config.load()
    assert config.ssl is not None
    config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
    uvicorn.Server(config).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
