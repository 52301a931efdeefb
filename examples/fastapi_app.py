"""A FastAPI producer with the async App (needs `pip install fastapi uvicorn`;
not a leasequeue dependency):

    python examples/worker.py &
    cd examples && uvicorn fastapi_app:api
    curl -X POST 'http://127.0.0.1:8000/signup?user=ann'
    curl http://127.0.0.1:8000/jobs/welcome:ann
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from tasks import app

import leasequeue as lq


@asynccontextmanager
async def lifespan(api: FastAPI) -> AsyncIterator[None]:
    yield
    await app.close()


api = FastAPI(lifespan=lifespan)


@api.post("/signup", status_code=202)
async def signup(user: str) -> dict[str, Any]:
    job = await app.enqueue("send_welcome", {"user": user}, job_id=f"welcome:{user}")
    return {"job": job.id, "created": job.created}


@api.get("/jobs/{job_id}")
async def get_job(job_id: str, wait: float = 0) -> dict[str, Any]:
    try:
        if wait:
            return {"id": job_id, "result": await app.wait(job_id, timeout=wait)}
        rec = await app.get_job(job_id)
    except lq.JobNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except lq.Timeout as exc:
        raise HTTPException(504, str(exc)) from None
    return {"id": rec.id, "state": rec.state, "result": rec.result}


def smoke() -> None:
    from fastapi.testclient import TestClient
    from smoke import worker_process

    with worker_process(), TestClient(api) as client:
        print(client.post("/signup", params={"user": "bob"}).json())
        print(client.get("/jobs/welcome:bob", params={"wait": 30}).json())


if __name__ == "__main__":
    if "--smoke" in sys.argv:
        smoke()
