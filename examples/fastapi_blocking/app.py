"""A FastAPI service with one endpoint that blocks the event loop and one that does not.

`/profile/{user_id}` calls a synchronous function (a stand-in for a sync DB driver,
`requests.get` or a heavy parse) straight from `async def`: every other request on the
process waits while it runs. `/profile-fixed/{user_id}` runs the same call in a worker thread.
`test_app.py` beside this file is what `pytest --ringloop-blocking=0.01` runs.
"""

import asyncio
import time

from fastapi import FastAPI

app = FastAPI()


def load_profile(user_id: int) -> dict:
    time.sleep(0.05)  # a sync DB driver / requests.get / heavy json.loads ...
    return {"id": user_id}


@app.get("/profile/{user_id}")
async def get_profile(user_id: int) -> dict:
    return load_profile(user_id)


@app.get("/profile-fixed/{user_id}")
async def get_profile_fixed(user_id: int) -> dict:
    return await asyncio.to_thread(load_profile, user_id)
