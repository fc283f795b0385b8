"""CPython's test_asyncio.test_runners (`asyncio.run`, `asyncio.Runner`) on each loop.

CPython's `BaseTest.new_loop` builds a `BaseEventLoop` with a mocked selector and a stub
`shutdown_asyncgens` that records it ran (its tearDown asserts that); here the loop is real and
the stub wraps the real `shutdown_asyncgens`.
"""

from test.test_asyncio import test_runners as cpython

from ._loops import LOOPS, loop_classes


def _recording(factory):
    def new_loop(self):
        loop = factory()
        loop.shutdown_ag_run = False
        real = loop.shutdown_asyncgens

        async def shutdown_asyncgens():
            loop.shutdown_ag_run = True
            await real()

        loop.shutdown_asyncgens = shutdown_asyncgens
        return loop

    return new_loop


for _suite in ("RunTests", "RunnerTests"):
    loop_classes(globals(), _suite, getattr(cpython, _suite), factory_attr=None)
    for _loop, _factory in LOOPS.items():
        globals()[f"{_suite}_{_loop}"].new_loop = _recording(_factory)

tearDownModule = cpython.tearDownModule
