"""The served webhook (`trainguard serve`): HTTPS in front of the engine, one module per concept.

A request's path through the package, in order:

    accept       http_protocol.py   HTTP/1.1 on uvicorn's httptools protocol, with the header and
                                    body limits and timeouts uvicorn lacks; TLS from tls.py, and
                                    client_auth.py for mutual TLS on the admission paths
    limits       app.py             the body received first (isolation.BodyBudget), then a slot
                 isolation.py       (isolation.Slots, else 429); the time budget; inline on the
                                    event loop within a slice, or on a deciding thread
    decode       admission_review.py  AdmissionReview v1 -> the engine's AdmissionInput (400 when
                                    it is not one)
    decide       webhook.engine     the one engine every front door uses
    encode       admission_review.py  Decision -> AdmissionReview response (allowed, status,
                                    warnings, JSONPatch); app.py logs (logs.py) and counts it

Around it: main.py runs `serve(settings)` (settings.py: every option, one frozen value) in this
process or in forked workers (workers.py, on sockets bound by sockets.py); server.py builds the
uvicorn server with its two-step stop (stopsignal.py keeps a stop that comes while starting);
reload.py swaps in changed policies, config and certificates; cluster_hooks.py starts the cluster
caches, self-registration and the audit; runtime_tuning.py sets the interpreter and allocator up
for short pauses; readiness_notes.py carries what /readyz reports about side tasks.

Nothing is imported here: `trainguard check` must not pay for uvicorn, and `trainguard serve`
sets up the workers' shared metrics directory (workers.shared_metrics_dir) before
prometheus_client is imported.
"""
