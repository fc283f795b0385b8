"""Django, served as ASGI (`srv_fw_django:asgi`) and WSGI (`srv_fw_django:wsgi`), with the
minimal settings of `srv_fw_django_settings` (the suite's framework contract, see
test_server_frameworks): `/json`, `/echo-json`, `/form`, `/upload`, `/stream`, `/error`,
unknown routes 404.
"""

from __future__ import annotations

import hashlib
import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "srv_fw_django_settings")

from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from django.http import JsonResponse, StreamingHttpResponse  # noqa: E402
from django.urls import path  # noqa: E402


def json_view(request):
    return JsonResponse({"framework": "django", "ok": True, "query": request.GET.dict()})


def echo_json(request):
    return JsonResponse(json.loads(request.body))


def form(request):
    return JsonResponse(request.POST.dict())


def upload(request):
    f = request.FILES["file"]
    content = f.read()
    return JsonResponse(
        {
            "filename": f.name,
            "size": len(content),
            "sha256": hashlib.sha256(content).hexdigest(),
            "note": request.POST["note"],
        }
    )


def stream(request):
    n = int(request.GET.get("n", "5"))
    if request.META.get("wsgi.version"):

        def lines():
            for i in range(n):
                yield f"line {i}\n"

    else:
        # Under ASGI Django wants an async iterator for a streaming response.
        async def lines():
            for i in range(n):
                yield f"line {i}\n"

    return StreamingHttpResponse(lines(), content_type="text/plain")


def error(request):
    raise RuntimeError("django boom")


urlpatterns = [
    path("json", json_view),
    path("echo-json", echo_json),
    path("form", form),
    path("upload", upload),
    path("stream", stream),
    path("error", error),
]

asgi = get_asgi_application()
wsgi = get_wsgi_application()
