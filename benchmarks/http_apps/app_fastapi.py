"""The FastAPI JSON endpoint: ``GET /json`` returns ``{"message": "Hello, world!"}`` through
a Pydantic response model, as a FastAPI application is usually written (an ``async def``
endpoint, so no thread pool is involved)."""

from fastapi import FastAPI
from pydantic import BaseModel


class Message(BaseModel):
    message: str


json = FastAPI()


@json.get("/json")
async def message() -> Message:
    return Message(message="Hello, world!")
