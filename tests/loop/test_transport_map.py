"""`loop._transports` on ringloop is `_core.TransportMap`: asyncio's `WeakValueDictionary` of
fd -> transport in Rust. The same behaviour tests run against the reference (a
`weakref.WeakValueDictionary`, what asyncio's selector loop uses) and ringloop's map."""

from __future__ import annotations

import gc
import weakref

import pytest
from ringloop import _core


class Transport:
    """Stands in for a transport: any weak-referenceable object."""

    def __init__(self, name: str) -> None:
        self.name = name


@pytest.fixture(params=["WeakValueDictionary", "TransportMap"])
def tmap(request):
    return (
        weakref.WeakValueDictionary()
        if request.param == "WeakValueDictionary"
        else _core.TransportMap()
    )


def test_set_get_contains_delete(tmap):
    a, b = Transport("a"), Transport("b")
    tmap[5] = a
    tmap[7] = b
    assert tmap[5] is a and tmap.get(7) is b
    assert 5 in tmap and 6 not in tmap and "5" not in tmap
    assert len(tmap) == 2 and sorted(tmap) == [5, 7] and sorted(tmap.keys()) == [5, 7]
    assert sorted(t.name for t in tmap.values()) == ["a", "b"]
    assert sorted((fd, t.name) for fd, t in tmap.items()) == [(5, "a"), (7, "b")]
    del tmap[5]
    assert 5 not in tmap and tmap.get(5) is None and tmap.get(5, "x") == "x"
    with pytest.raises(KeyError):
        tmap[5]
    with pytest.raises(KeyError):
        del tmap[5]


def test_a_new_transport_on_a_reused_fd_replaces_the_old(tmap):
    a, b = Transport("a"), Transport("b")
    tmap[5] = a
    tmap[5] = b
    assert tmap[5] is b and len(tmap) == 1


def test_a_dead_transport_is_gone(tmap):
    a, b = Transport("a"), Transport("b")
    tmap[5] = a
    tmap[6] = b
    del a
    gc.collect()
    assert 5 not in tmap and tmap.get(5) is None and len(tmap) == 1 and list(tmap) == [6]
    with pytest.raises(KeyError):
        tmap[5]
    with pytest.raises(KeyError):
        del tmap[5]
    assert tmap.pop(5, None) is None
    tmap[5] = c = Transport("c")  # the fd reused by a new transport
    assert tmap[5] is c


def test_pop(tmap):
    a = Transport("a")
    tmap[5] = a
    assert tmap.pop(5) is a and 5 not in tmap
    assert tmap.pop(5, "d") == "d"
    with pytest.raises(KeyError):
        tmap.pop(5)


def test_clear(tmap):
    keep = [Transport(str(i)) for i in range(3)]
    for i, t in enumerate(keep):
        tmap[i] = t
    tmap.clear()
    assert len(tmap) == 0 and list(tmap) == []


def test_the_map_holds_no_strong_reference(tmap):
    a = Transport("a")
    ref = weakref.ref(a)
    tmap[5] = a
    del a
    gc.collect()
    assert ref() is None


def test_a_key_that_is_not_an_fd():
    m = _core.TransportMap()
    with pytest.raises(TypeError, match="file descriptors"):
        m["5"] = Transport("a")
    with pytest.raises(KeyError):
        m["5"]
    assert m.get("5") is None and "5" not in m


def test_ringloops_loop_uses_it():
    import ringloop

    loop = ringloop.new_event_loop()
    try:
        assert type(loop._transports) is _core.TransportMap
    finally:
        loop.close()
