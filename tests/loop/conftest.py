"""Fixtures shared by the loop behaviour tests (the loop fixtures are in tests/conftest.py)."""

import socket

import pytest


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    yield a, b
    a.close()
    b.close()
