"""`crossmod serve` as users run it: a real HTTP server on loopback, its answers equal to `crossmod predict` on the same
memes, every culture of one run on one forward pass, and the door: bad fields named, limits, a bounded queue, a bearer
token, slow clients, one log line per request without meme content, and a SIGTERM that drains and exits 0."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from crossmod.data.predict_inputs import read_inputs
from tests.conftest import ROOT, SMALL_DATA, TrainRun
from tests.data.sources.layouts import bomb_png, image_bytes
from tests.serving.served import Served, as_memes
from tests.zygote import run_python

pytest.importorskip("litserve")
CULTURES = ("US", "DE", "MX", "IN", "CN")
SECRET_CAPTION = "a caption that must never reach the logs 7f3a"


@pytest.fixture(scope="module")
def exported(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One small synthetic concat-fusion run with a moderation policy, every culture exported."""
    train = TrainRun(data_dir, tmp_path_factory.mktemp("serve-runs"))
    train(*SMALL_DATA, "debug=limit", "policy=cautious", env={"CROSSMOD_RUN_ID": "served"})
    run = train.log_dir / "synthetic_concat" / "runs" / "served"
    out = tmp_path_factory.mktemp("serve-export")
    done = run_python([sys.executable, str(ROOT / "export.py"), f"run={run}", f"out={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    manifest = json.loads((run / "manifest.json").read_text())
    shards = data_dir / "shards" / f"{manifest['dataset']}-{manifest['fingerprint']}"
    return {"shards": shards, "run": run, **{culture: out / culture for culture in CULTURES}}


@pytest.fixture(scope="module")
def memes(exported: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], Path]:
    """24 memes of the synthetic shards, as API memes and as the JSONL file crossmod predict reads."""
    records = list(read_inputs(exported["shards"]))[:24]
    folder = tmp_path_factory.mktemp("serve-memes")
    lines = []
    for k, record in enumerate(records):
        (folder / f"{k}.png").write_bytes(record["image"])
        lines.append(json.dumps({"id": record["id"], "text": record["text"], "image": f"{k}.png", "lang": record["lang"]}))
    (folder / "memes.jsonl").write_text("\n".join(lines) + "\n")
    return as_memes(records), folder / "memes.jsonl"


@pytest.fixture(scope="module")
def token_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("serve-auth") / "token"
    path.write_text("s3cret-token-of-this-test-0123456789\n")
    return path


@pytest.fixture(scope="module")
def server(exported: dict[str, Path], token_file: Path):
    served = Served(
        [exported[c] for c in CULTURES],
        f"auth.token_file={token_file}",
        "limits.max_queue=3",
        "limits.max_body_bytes=400000",
        "limits.max_image_bytes=100000",
        "limits.max_memes=32",
        "limits.max_text_chars=2000",
        "batching.max_batch_size=4",
        "batching.batch_timeout_s=0.05",
    )
    yield served
    if served.process.poll() is None:
        served.stop()


AUTH = {"authorization": "Bearer s3cret-token-of-this-test-0123456789"}


def test_answers_equal_crossmod_predict_for_every_culture_on_one_forward_pass(server, exported, memes, tmp_path):
    api_memes, jsonl = memes
    answers: dict[str, dict] = {}
    with ThreadPoolExecutor(max_workers=3) as pool:  # requests at once (up to max_queue), so LitServe batches them together
        for status, _, body in pool.map(lambda k: server.classify(api_memes[k : k + 3], AUTH), range(0, len(api_memes), 3)):
            assert status == 200, body
            answers.update({a["id"]: a for a in body["memes"]})
    out = tmp_path / "predicted.jsonl"
    folders = ",".join(str(exported[c]) for c in CULTURES)
    done = run_python([sys.executable, str(ROOT / "predict.py"), f"adapters=[{folders}]", f"inputs={jsonl}", f"out={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    predicted = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(answers) == len(predicted) == len(api_memes)
    for row in predicted:
        answer = answers[row["id"]]
        assert answer["disagreement"] == pytest.approx(row["disagreement"], abs=1e-5)
        for culture in CULTURES:
            got = answer["cultures"][culture]
            assert got["p"] == pytest.approx(row[f"{culture}_probability"], abs=1e-5)
            assert got["p_calibrated"] == pytest.approx(row[f"{culture}_probability_calibrated"], abs=1e-5)
            assert got["decision"] == row[f"{culture}_decision"] and got["action"] == row[f"{culture}_action"]
            assert got["policy"] == row["policy"] == "cautious"
    status, _, models = server.get("/v1/models", AUTH)
    assert status == 200 and [card["culture"] for card in models["cultures"]] == list(CULTURES)
    assert all(card["policy"]["name"] == "cautious" and card["metrics"]["test"] for card in models["cultures"])
    status, _, schema = server.get("/openapi.json", AUTH)
    assert status == 200 and "/v1/classify" in schema["paths"] and "Meme" in json.dumps(schema["components"])


def test_each_bad_field_is_a_422_naming_it_and_the_server_goes_on(server, memes):
    good = memes[0][0]
    cases = {
        ("memes", 0, "image"): {**good, "image": "not base64!"},
        ("memes", 1, "image"): [good, {**good, "id": "png-header-only", "image": base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 64).decode()}],
        ("memes", 0, "text"): {**good, "text": "x" * 2001},
        ("memes", 0, "id"): {**good, "id": True},
        ("memes", 0, "colour"): {**good, "colour": "red"},
    }
    for loc, meme in cases.items():
        status, _, body = server.classify(meme if isinstance(meme, list) else [meme], AUTH)
        assert status == 422, (loc, body)
        assert any(tuple(error["loc"][1:]) == loc for error in body["detail"]), (loc, body)
        assert "not base64!" not in json.dumps(body)  # the values sent are never echoed back
    bomb = base64.b64encode(bomb_png()).decode()
    status, _, body = server.classify([{**good, "image": bomb}], AUTH)
    assert status == 422 and body["detail"][0]["loc"][1:] == ["memes", 0, "image"] and "decompression bomb" in body["detail"][0]["msg"]
    big = base64.b64encode(image_bytes(1, "PNG", size=8) + b"\0" * 120_000).decode()
    status, _, body = server.classify([{**good, "image": big}], AUTH)
    assert status == 422 and "limit of 100,000" in body["detail"][0]["msg"]
    status, _, body = server.classify([{**good, "id": "same"}, {**good, "id": "same"}], AUTH)
    assert status == 422 and "memes[1].id is memes[0].id again" in json.dumps(body)
    status, _, body = server.classify({"memes": []}, AUTH)
    assert status == 422 and body["detail"][0]["loc"] == ["body", "memes"]
    status, _, body = server.classify([{**good, "id": f"m{k}"} for k in range(33)], AUTH)
    assert status == 422 and "limit of 32" in json.dumps(body)
    status, _, body = server.request("POST", "/v1/classify", b"{not json", {"content-type": "application/json", **AUTH})
    assert status == 422
    status, _, body = server.request("POST", "/v1/classify", b"x" * 400_001, {"content-type": "application/json", **AUTH})
    assert status == 413 and "400,000" in body["detail"]
    status, _, body = server.classify([good], AUTH)
    assert status == 200 and body["memes"][0]["id"] == good["id"]


def test_the_bearer_token_guards_every_route_but_the_probes(server, memes):
    good = memes[0][0]
    assert server.classify([good])[0] == 401
    assert server.classify([good], {"authorization": "Bearer wrong"})[0] == 401
    assert server.get("/v1/models")[0] == 401 and server.get("/openapi.json")[0] == 401
    assert server.get("/healthz")[0] == 200 and server.get("/readyz")[0] == 200
    status, headers, _ = server.classify([good], {**AUTH, "x-request-id": "client-id-42"})
    assert status == 200 and headers["x-request-id"] == "client-id-42"


def test_slow_clients_stall_no_one_and_a_full_queue_answers_503_with_retry_after(server, memes):
    good = memes[0][0]
    slow = []
    try:
        for _ in range(2):  # two clients that send their headers and then nothing of the body they announced
            client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            client.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: " + AUTH["authorization"].encode() + b"\r\nContent-Length: 5000\r\n\r\n{\"mem")
            slow.append(client)
        time.sleep(0.5)
        started = time.monotonic()
        assert server.classify([good], AUTH)[0] == 200 and time.monotonic() - started < 30
        client = socket.create_connection(("127.0.0.1", server.port), timeout=10)  # the third fills the queue (max_queue=3)
        client.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nAuthorization: " + AUTH["authorization"].encode() + b"\r\nContent-Length: 5000\r\n\r\n{")
        slow.append(client)
        time.sleep(0.5)
        status, headers, body = server.classify([good], AUTH)
        assert status == 503 and headers["retry-after"] == "1" and "max_queue" in body["detail"]
    finally:
        for client in slow:
            client.close()
    time.sleep(0.5)
    assert server.classify([good], AUTH)[0] == 200


def test_sigterm_answers_the_requests_in_flight_refuses_new_ones_and_exits_0(exported, memes):
    served = Served([exported["US"], exported["DE"]], "batching.batch_timeout_s=3", "batching.max_batch_size=8")
    answered: dict = {}

    def send() -> None:
        answered["reply"] = served.classify(memes[0][:2])

    thread = threading.Thread(target=send)
    thread.start()
    time.sleep(1.0)  # the request waits in LitServe's batch window (3 s)
    served.process.terminate()
    time.sleep(1.0)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", served.port), timeout=5).recv(1)
    thread.join(timeout=60)
    code, out = served.stop()
    assert answered["reply"][0] == 200 and len(answered["reply"][2]["memes"]) == 2
    assert code == 0 and "[serve] drained and stopped" in out, out[-3000:]


def test_the_documented_curl_requests_are_answered_json_and_form_alike(server, memes, token_file, tmp_path):
    lines = [line for line in (ROOT / "docs" / "serving.md").read_text().splitlines() if line.startswith("curl ")]
    (tmp_path / "memes.json").write_text(json.dumps({"memes": memes[0][:2]}))
    (tmp_path / "meme.jpg").write_bytes(base64.b64decode(memes[0][0]["image"]))
    shutil.copy(token_file, tmp_path / "token")
    answers = []
    for line in lines:
        done = subprocess.run(["bash", "-c", line.replace("http://127.0.0.1:8000", server.url)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout)["memes"])
    json_answer, form_answer = answers
    assert [a["id"] for a in json_answer] == [m["id"] for m in memes[0][:2]] and form_answer[0]["id"] == "m1"
    # the form upload of the first meme's image with another caption: scored like the JSON meme it stands for
    status, _, body = server.classify([{"id": "m1", "text": "when the landlords show up again", "image": memes[0][0]["image"]}], AUTH)
    assert status == 200 and body["memes"][0]["cultures"]["US"]["p"] == pytest.approx(form_answer[0]["cultures"]["US"]["p"], abs=1e-6)
    bad = "--b\r\nContent-Disposition: form-data; name=\"id\"\r\n\r\nx\r\n--b\r\nContent-Disposition: form-data; name=\"image\"; filename=\"a.png\"\r\n\r\nnot an image\r\n--b--\r\n"
    status, _, body = server.request("POST", "/v1/classify", bad.encode(), {"content-type": "multipart/form-data; boundary=b", **AUTH})
    assert status == 422 and body["detail"][0]["loc"][1:] == ["memes", 0, "image"], body
    status, _, body = server.request("POST", "/v1/classify", b"garbage", {"content-type": "multipart/form-data", **AUTH})
    assert status == 422 and "boundary" in json.dumps(body), body


def test_a_retrieval_culture_answers_with_its_neighbours_as_predict_does(exported, memes, tmp_path):
    """A retrieval export scores itself (its own body) beside a head export sharing nothing with it: two forward passes,
    and the rows (probability, neighbours, disagreement) are predict's."""
    from crossmod.serving.cultures import ServedCultures

    done = run_python([sys.executable, str(ROOT / "export.py"), f"run={exported['run']}", "culture=US", "kind=retrieval", f"out={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    served = ServedCultures.load([str(tmp_path / "US"), str(exported["DE"])])
    assert served.forwards() == 2 and [body.shared for body in served.bodies] == [False, True]
    records = list(read_inputs(memes[1]))
    rows = served.rows(records)
    out = tmp_path / "predicted.jsonl"
    done = run_python([sys.executable, str(ROOT / "predict.py"), f"adapters=[{tmp_path / 'US'},{exported['DE']}]", f"inputs={memes[1]}", f"out={out}"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    predicted = [json.loads(line) for line in out.read_text().splitlines()]
    for row, expected in zip(rows, predicted, strict=True):
        assert row["US_neighbours"] == expected["US_neighbours"] and row["US_neighbour_labels"] == expected["US_neighbour_labels"]
        for key in ("US_probability", "DE_probability", "disagreement"):
            assert row[key] == pytest.approx(expected[key], abs=1e-5), key
    from crossmod.serving.api import answer

    shown = answer(rows[0], {"US": "cautious", "DE": "cautious"})["cultures"]
    assert [n["id"] for n in shown["US"]["neighbours"]] == rows[0]["US_neighbours"] and shown["US"]["action"] == rows[0]["US_action"]
    assert shown["DE"]["policy"] == "cautious" and shown["DE"]["p"] == rows[0]["DE_probability"]


def test_one_request_per_batch_is_answered_as_batched_requests_are(exported, memes):
    """LitServe hands `predict` one request when max_batch_size=1 and a list of them otherwise; both answer alike, and a
    request lacking an input a culture reads gets its own 422 beside the others of its batch."""
    from crossmod.serving.api import CultureAPI
    from crossmod.serving.memes import ClassifyRequest

    folders = [str(exported[c]) for c in ("US", "DE")]
    one, many = CultureAPI(folders, max_batch_size=1), CultureAPI(folders, max_batch_size=4)
    one.setup("cpu")
    many.setup("cpu")
    request = one.decode_request(ClassifyRequest(memes=memes[0][:3]))
    lacking = many.decode_request(ClassifyRequest(memes=[{"id": "no-image", "text": "a caption"}]))
    alone = one.encode_response(one.predict(request))
    batched = [many.encode_response(output) for output in many.predict([request, lacking, request])]
    assert [a["id"] for a in alone["memes"]] == [a["id"] for a in batched[0]["memes"]] == [m["id"] for m in memes[0][:3]]
    for first, again, want in zip(batched[0]["memes"], batched[2]["memes"], alone["memes"], strict=True):
        for culture in ("US", "DE"):  # equal up to float rounding: rows in another batch are padded with others
            assert first["cultures"][culture]["p"] == pytest.approx(want["cultures"][culture]["p"], abs=1e-6)
            assert again["cultures"][culture]["p"] == pytest.approx(want["cultures"][culture]["p"], abs=1e-6)
    assert batched[1].status_code == 422 and json.loads(batched[1].body)["detail"][0]["loc"] == ["body", "memes", 0, "image"]


def test_one_log_line_per_request_without_captions_images_or_the_token(server, memes):
    good = {**memes[0][0], "text": SECRET_CAPTION}
    assert server.classify([good], {**AUTH, "x-request-id": "log-check-1"})[0] == 200
    code, out = server.stop()
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    mine = [line for line in lines if line["request_id"] == "log-check-1"]
    assert len(mine) == 1 and mine[0]["path"] == "/v1/classify" and mine[0]["status"] == 200 and mine[0]["ms"] > 0
    assert SECRET_CAPTION not in out and good["image"][:40] not in out and "s3cret-token" not in out
    assert len(lines) >= 20 and {line["status"] for line in lines} >= {200, 401, 413, 422, 503}
