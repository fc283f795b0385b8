"""The endpoint tests a team would already have; `--ringloop-blocking` turns them into
blocking checks without changing a line."""

import httpx
import pytest
from app import app


async def get(path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        return await client.get(path)


@pytest.mark.asyncio
async def test_profile():
    assert (await get("/profile/7")).json() == {"id": 7}


@pytest.mark.asyncio
async def test_profile_fixed():
    assert (await get("/profile-fixed/7")).json() == {"id": 7}
