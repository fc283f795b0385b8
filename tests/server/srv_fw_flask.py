"""Flask (WSGI; the suite's framework contract, see test_server_frameworks): `/json`,
`/echo-json`, `/form`, `/upload`, `/stream`, `/error`, unknown routes 404.
"""

from __future__ import annotations

import hashlib

from flask import Flask, Response, jsonify, request, stream_with_context

app = Flask(__name__)


@app.get("/json")
def json_view():
    return jsonify(framework="flask", ok=True, query=request.args.to_dict())


@app.post("/echo-json")
def echo_json():
    return jsonify(request.get_json())


@app.post("/form")
def form():
    return jsonify(request.form.to_dict())


@app.post("/upload")
def upload():
    f = request.files["file"]
    content = f.read()
    return jsonify(
        filename=f.filename,
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        note=request.form["note"],
    )


@app.get("/stream")
def stream():
    n = int(request.args.get("n", "5"))

    def lines():
        for i in range(n):
            yield f"line {i}\n"

    return Response(stream_with_context(lines()), mimetype="text/plain")


@app.get("/error")
def error():
    raise RuntimeError("flask boom")
