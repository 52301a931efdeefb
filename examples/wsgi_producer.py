"""A WSGI producer (the shape of a Django or Flask view) with the sync API,
lq.SyncApp: no event loop needed. Standard library only (wsgiref).

    python examples/worker.py &          # runs the jobs
    python examples/wsgi_producer.py     # serves http://127.0.0.1:8000
    curl -X POST -d user=ann http://127.0.0.1:8000/signup
    curl http://127.0.0.1:8000/jobs/welcome:ann
    curl http://127.0.0.1:8000/jobs/welcome:ann/wait

In Django or Flask: build one SyncApp at import (it is thread-safe; its
connection pool hands each thread its own connection) and call
sync.enqueue(...) in the view, exactly as here."""

from __future__ import annotations

import json
import sys
import threading
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from tasks import app

import leasequeue as lq

sync = lq.SyncApp.from_app(app)  # same prefix, queues and routing as the service


def application(environ: dict[str, Any],
                start_response: Callable[..., Any]) -> Iterable[bytes]:
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    try:
        if method == "POST" and path == "/signup":
            size = int(environ.get("CONTENT_LENGTH") or 0)
            user = parse_qs(environ["wsgi.input"].read(size).decode())["user"][0]
            job = sync.enqueue("send_welcome", {"user": user}, job_id=f"welcome:{user}",
                               correlation_id=environ.get("HTTP_X_REQUEST_ID"))
            return reply(start_response, "202 Accepted", {"job": job.id, "created": job.created})
        if method == "GET" and path.startswith("/jobs/") and path.endswith("/wait"):
            result = sync.wait(path[len("/jobs/"):-len("/wait")], timeout=10)
            return reply(start_response, "200 OK", {"result": result})
        if method == "GET" and path.startswith("/jobs/"):
            rec = sync.get_job(path[len("/jobs/"):])
            return reply(start_response, "200 OK", {"id": rec.id, "state": rec.state,
                                                    "attempt": rec.attempt,
                                                    "result": rec.result})
        return reply(start_response, "404 Not Found", {"error": "no such route"})
    except lq.JobNotFound as exc:
        return reply(start_response, "404 Not Found", {"error": str(exc)})
    except lq.Timeout as exc:
        return reply(start_response, "504 Gateway Timeout", {"error": str(exc)})
    except lq.JobFailed as exc:
        return reply(start_response, "502 Bad Gateway", {"error": str(exc)})
    except lq.LeaseQueueError as exc:  # bad input (ConfigError, PayloadError), Redis down
        return reply(start_response, "503 Service Unavailable", {"error": str(exc)})


def reply(start_response: Callable[..., Any], status: str, body: dict[str, Any]) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [data]


class Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None


def smoke() -> None:
    """Serve on a free port, sign a user up through HTTP, wait for the job."""
    from smoke import worker_process

    server = make_server("127.0.0.1", 0, application, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    with worker_process():
        signup = urllib.request.Request(f"{base}/signup", data=b"user=ann", method="POST")
        for request in (signup, f"{base}/jobs/welcome:ann/wait", f"{base}/jobs/welcome:ann"):
            print(json.dumps(json.load(urllib.request.urlopen(request, timeout=30))))
    server.shutdown()
    sync.close()


if __name__ == "__main__":
    if "--smoke" in sys.argv:
        smoke()
    else:
        print("serving on http://127.0.0.1:8000 (POST /signup, GET /jobs/ID, GET /jobs/ID/wait)")
        make_server("127.0.0.1", 8000, application).serve_forever()
